//! How the join fetches the heap pages its probes found: from the pool, read into the
//! task's inbox under a permit (free now, or asked of admission), or by a job that waits in
//! admission's queue and joins another request's read.

use datafusion::common::Result;
use foldhash::HashMap;
use futures::FutureExt;

use super::{Job, Join};
use crate::access::admission::Acquire;
use crate::access::heap_reads::Start;
use crate::access::steps::{PageGroups, group_by_page, missing_heap_page};
use crate::access::{InboxReader, Permit, to_df};
use crate::io::buf::PageBuf;

/// What became of a heap page to read without a job (see `access::heap_reads`).
enum Direct {
    /// Its read started (or it was found in the pool meanwhile).
    Started,
    /// The query holds all the permits it may, no other query's read is queued, and this
    /// task holds or has asked for its part of them: it waits for one of its own reads to
    /// give its permit back, or for a permit it asked for.
    AwaitPermit,
    /// No permit is free: it asks admission for one (see [`PermitFor`]).
    QueueForPermit,
    /// It is fetched by a job, under the permit given if one was granted for it (another
    /// query's read of the page is under way: the job joins it without asking again).
    Unavailable(Option<Permit>),
}

/// A permit asked of admission for a heap page to read into the inbox.
pub(super) struct PermitFor {
    page_no: u64,
    acquire: Acquire,
}

impl std::future::Future for PermitFor {
    type Output = (u64, Permit);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<(u64, Permit)> {
        let page_no = self.page_no;
        self.acquire.poll_unpin(cx).map(|permit| (page_no, permit))
    }
}

/// Probes whose row ids are known, gathered for one pool lookup of their pages.
#[derive(Default)]
pub(super) struct FoundNow {
    /// Each probe's row slots, grouped by page.
    probes: Vec<(u64, PageGroups)>,
    /// The pages they add to the fetches (not among them already), once each: the window of
    /// fetches counts as if they were fetched one probe at a time.
    planned: foldhash::HashSet<u64>,
}

impl FoundNow {
    /// Adds `probe` with row ids `ids`; `fetching` are the pages being fetched now.
    pub(super) fn push<V>(&mut self, probe: u64, ids: &[u64], fetching: &HashMap<u64, V>) {
        let groups = group_by_page(ids);
        for (page_no, _) in &groups {
            if !fetching.contains_key(page_no) {
                self.planned.insert(*page_no);
            }
        }
        self.probes.push((probe, groups));
    }

    /// Pages it adds to the fetches.
    pub(super) fn pages(&self) -> usize {
        self.planned.len()
    }
}

/// What one lookup of many pages found in the pool: `pages[i]` is page `wanted[i]` (sorted).
struct Cached {
    wanted: Vec<u64>,
    pages: Vec<Option<PageBuf>>,
}

impl Cached {
    /// The page `page_no` if the lookup found it (once: its later requesters find it among
    /// the fetches).
    fn take(&mut self, page_no: u64) -> Option<PageBuf> {
        let i = self.wanted.binary_search(&page_no).ok()?;
        self.pages[i].take()
    }
}

impl Join {
    pub(super) fn fetch_pages(&mut self, probe: u64, ids: &[u64]) {
        self.fetch_groups(probe, group_by_page(ids), None);
    }

    /// Fetches the pages of probes whose walks are over, and ends the walks: one pool lookup
    /// for the pages of all of them (see `TableIo::cached_heap_pages`), then each probe's
    /// fetches as [`fetch_pages`](Self::fetch_pages) would start them. `found` is left
    /// empty, its room kept.
    pub(super) fn fetch_found(&mut self, found: &mut FoundNow) {
        // One probe (in order, nearly always): the lookups one by one cost less.
        let mut cached = (found.probes.len() > 1).then(|| {
            // The pages not being fetched yet, once each, as gathered.
            let mut wanted: Vec<u64> = found.planned.drain().collect();
            wanted.sort_unstable();
            let mut pages = Vec::new();
            (self.fetch.inner.table).cached_heap_pages(
                &wanted,
                self.fetch.steps.counters(),
                &mut pages,
            );
            Cached { wanted, pages }
        });
        found.planned.clear();
        for (probe, groups) in found.probes.drain(..) {
            self.fetch_groups(probe, groups, cached.as_mut());
            self.release(probe); // the walk is over
        }
    }

    /// Fetches `probe`'s pages (row slots grouped by page); `cached` holds what a lookup made
    /// for many probes at once found in the pool (else each page is looked up here).
    fn fetch_groups(&mut self, probe: u64, groups: PageGroups, mut cached: Option<&mut Cached>) {
        let Some(p) = self.probes.get_mut(&probe) else {
            return;
        };
        p.pending += groups.len();
        for (page_no, slots) in groups {
            if let Some(waiting) = self.pages.get_mut(&page_no) {
                waiting.push((probe, slots));
                continue;
            }
            self.pages
                .insert(page_no, smallvec::smallvec![(probe, slots)]);
            // A page in the pool needs no task (a boxed future, a wake-up and a poll each, per
            // page). Its first lines are fetched into the cache now, and it is decoded at the
            // loop's next turn, after the other probes' lookups: by then they have arrived.
            let in_pool = match cached.as_deref_mut() {
                // Its head was asked for by the lookup.
                Some(cached) => cached.take(page_no),
                None => (self.fetch.inner.table)
                    .cached_heap_page(page_no, self.fetch.steps.counters())
                    .inspect(prefetch_head),
            };
            if let Some(page) = in_pool {
                self.ready.push_back((page_no, page));
                continue;
            }
            match self.inbox {
                Some(_) => self.to_start.push_back(page_no),
                None => self.push_fetch_job(page_no, None),
            }
        }
    }

    /// Asks admission for a permit to read heap page `page_no` into the inbox.
    fn queue_for_permit(&mut self, page_no: u64) {
        match self.fetch.steps.acquire() {
            Some(acquire) => {
                self.node.add_heap_permits_queued(1);
                self.permit_waits.push(PermitFor { page_no, acquire })
            }
            None => self.push_fetch_job(page_no, None),
        }
    }

    /// Fetches heap page `page_no` by a job: under `permit`, or one it waits for in
    /// admission's queue, it reads the page through the pool's `get` (joining another
    /// request's read).
    fn push_fetch_job(&mut self, page_no: u64, permit: Option<Permit>) {
        let fetch = self.fetch.clone();
        self.jobs.push(
            async move {
                let rows = async {
                    let (inner, steps) = (&fetch.inner, &fetch.steps);
                    let held = missing_heap_page(&inner.table, page_no, steps, permit).await?;
                    // Probes take a few rows of the page (copied into the output).
                    inner.read_page(page_no, &held.page, fetch.in_place)
                }
                .await;
                Job::Page(page_no, rows)
            }
            .boxed(),
        );
    }

    /// Starts reading heap page `page_no` into the inbox under a permit free now (or hands
    /// it over, found in the pool meanwhile).
    fn try_direct(&mut self, page_no: u64) -> Direct {
        let Some(inbox) = &self.inbox else {
            return Direct::Unavailable(None);
        };
        let Some(permit) = self.fetch.steps.try_permit() else {
            // At the query's own limit, only its reads give permits back: once this task
            // holds or has asked for its part of the limit, it waits for its own reads to
            // end (the inbox's, or the permits it asked for). At the runtime's cap (any
            // query's read may free one), or with other queries' reads queued, admission
            // decides whose turn it is.
            let steps = &self.fetch.steps;
            let own_limit = steps.query().permits_in_use() >= steps.query().limit();
            let asked = self.direct.len() + self.permit_waits.len();
            let fair = self.reader.as_ref().map_or(1, InboxReader::fair_permits);
            return match own_limit && asked > 0 && asked >= fair && !steps.others_queued() {
                true => Direct::AwaitPermit,
                false => Direct::QueueForPermit,
            };
        };
        let started = inbox.start(page_no);
        self.started(page_no, permit, started)
    }

    /// Records what starting heap page `page_no`'s read under `permit` did.
    fn started(&mut self, page_no: u64, permit: Permit, started: Start) -> Direct {
        match started {
            Start::Cached(page) => self.ready.push_back((page_no, page)),
            Start::Started => {
                self.fetch.steps.note_read();
                self.direct.insert(page_no, permit);
            }
            Start::Unavailable => return Direct::Unavailable(Some(permit)),
        }
        Direct::Started
    }

    /// Starts the pages to read into the inbox while permits are free (the task holds its
    /// query's turn). When none is, the rest wait for the inbox's next reads to end (see
    /// [`Direct::AwaitPermit`]), or ask admission for permits.
    pub(super) fn start_waiting(&mut self) {
        while let Some(&page_no) = self.to_start.front() {
            match self.try_direct(page_no) {
                Direct::AwaitPermit => return,
                Direct::Started => {}
                Direct::QueueForPermit => self.queue_for_permit(page_no),
                Direct::Unavailable(permit) => self.push_fetch_job(page_no, permit),
            }
            self.to_start.pop_front();
        }
    }

    /// Starts heap page `page_no` under `permit`, granted by admission.
    pub(super) fn start_under(&mut self, page_no: u64, permit: Permit) {
        let started = match &self.inbox {
            Some(inbox) => inbox.start(page_no),
            None => unreachable!("permits are asked for only to read into the inbox"),
        };
        if let Direct::Unavailable(permit) = self.started(page_no, permit, started) {
            self.push_fetch_job(page_no, permit);
        }
    }

    /// Decodes the pages whose reads ended in the inbox, for their probes; each read's permit
    /// is given back once its page is used.
    pub(super) fn take_ended(&mut self) -> Result<()> {
        let mut ended = std::mem::take(&mut self.ended);
        for (page_no, page) in ended.drain(..) {
            let permit = self.direct.remove(&page_no);
            let fetch = &self.fetch;
            let rows = (page.map_err(to_df))
                .and_then(|page| fetch.inner.read_page(page_no, &page, fetch.in_place));
            self.done(Job::Page(page_no, rows))?;
            drop(permit);
        }
        self.ended = ended;
        self.start_waiting();
        Ok(())
    }
}

/// Asks the CPU to bring the first lines of `page` (its header and column directory, which
/// decoding reads first) into the cache, without waiting for them.
fn prefetch_head(page: &PageBuf) {
    crate::storage::page::prefetch(page, 2);
}
