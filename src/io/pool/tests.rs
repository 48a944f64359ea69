//! The buffer pool's tests: lookups, single flight, cancellation, memory.

use super::*;
use crate::io::buf::Recycler;
use crate::storage::page::AlignedBuf;
use std::future::Future;
use std::pin::Pin;

fn page(byte: u8) -> PageBuf {
    let mut buf = AlignedBuf::zeroed(4096);
    buf[0] = byte;
    PageBuf::new(buf, None::<Arc<Recycler>>)
}

#[derive(Debug, Default)]
struct Limited {
    limit: usize,
    held: Mutex<usize>,
}

impl PoolMemory for Limited {
    fn try_grow(&self, bytes: usize) -> bool {
        let mut held = self.held.lock();
        if *held + bytes > self.limit {
            return false;
        }
        *held += bytes;
        true
    }
    fn shrink(&self, bytes: usize) {
        *self.held.lock() -= bytes;
    }
}

/// The batched lookup finds exactly what lookups one at a time find (cached pages only,
/// not reads in flight), in the order asked, duplicates included, counts its hits and
/// renews the chances of what it finds.
#[tokio::test]
async fn many_lookups_at_once_find_what_single_lookups_find() {
    let pool = BufferPool::new(1 << 24);
    for i in 0..300u64 {
        let key = (FileId((i % 3) as u32), i * 4096);
        let load = move || futures::future::ready(Ok(page(i as u8))).boxed();
        pool.get(key, 4096, PageHint::Data, load).await.unwrap();
    }
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let loading_key = (FileId(0), 1 << 30);
    let mut loading = Box::pin(pool.get(loading_key, 4096, PageHint::Data, move || {
        async move {
            let _ = rx.await;
            Ok(page(0))
        }
        .boxed()
    }));
    assert!(futures::poll!(loading.as_mut()).is_pending());
    // Present, absent (another file, another offset), loading, and repeated keys.
    let mut keys: Vec<PageKey> = (0..400u64)
        .map(|i| (FileId((i % 3) as u32), i * 4096))
        .collect();
    keys.extend([
        (FileId(7), 0),
        loading_key,
        (FileId(1), 4096),
        (FileId(1), 4096),
    ]);
    // Worn down to no chance, as the clock leaves a page it passed.
    let worn = (FileId(1), 4096);
    pool.shard(&worn).lock().map.get_mut(&worn).unwrap().chances = 0;
    let hits_before = pool.stats().hits;
    let mut out = Vec::new();
    let found = pool.get_cached_many(&keys, PageHint::Data, &mut out);
    assert_eq!(out.len(), keys.len());
    assert_eq!(found, 302, "300 pages, one of them asked three times");
    assert_eq!(pool.stats().hits - hits_before, 302);
    for (key, got) in keys.iter().zip(&out) {
        let single = pool.get_cached(*key, PageHint::Data);
        assert_eq!(
            got.as_ref().map(|p| p.as_ptr()),
            single.as_ref().map(|p| p.as_ptr()),
            "{key:?}"
        );
    }
    assert!(
        out[300..402].iter().all(Option::is_none),
        "absent pages and a read in flight are not found"
    );
    assert_eq!(pool.shard(&worn).lock().map[&worn].chances, 1);
    drop(tx);
    loading.await.unwrap();
    pool.get_cached_many(&[loading_key], PageHint::Data, &mut out);
    assert!(out[0].is_some(), "cached once its read is done");
}

type Request<'a> = Pin<Box<dyn Future<Output = Result<(PageBuf, bool)>> + Send + 'a>>;

/// Two requests for page 0 of file 0, polled once each: the first started its read
/// (counted in `loads`), the second joined it. The read returns `outcome(1)` once the
/// sender fires (or is dropped).
async fn started_and_joined<'a>(
    pool: &'a BufferPool,
    loads: &Arc<AtomicUsize>,
    outcome: fn(u8) -> Result<PageBuf>,
) -> (
    futures::channel::oneshot::Sender<()>,
    Request<'a>,
    Request<'a>,
) {
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let rx = rx.shared();
    let request = |byte: u8| -> Request<'a> {
        let (rx, loads) = (rx.clone(), loads.clone());
        Box::pin(pool.get((FileId(0), 0), 4096, PageHint::Data, move || {
            loads.fetch_add(1, SeqCst);
            async move {
                let _ = rx.await;
                outcome(byte)
            }
            .boxed()
        }))
    };
    let (mut driver, mut joiner) = (request(1), request(2));
    assert!(futures::poll!(driver.as_mut()).is_pending());
    assert!(futures::poll!(joiner.as_mut()).is_pending());
    assert_eq!(pool.stats().joined, 1);
    (tx, driver, joiner)
}

#[tokio::test]
async fn a_joiner_drives_on_the_read_its_driver_left() {
    let pool = BufferPool::new(1 << 20);
    let loads = Arc::new(AtomicUsize::new(0));
    let (tx, driver, joiner) = started_and_joined(&pool, &loads, |b| Ok(page(b))).await;
    drop(driver);
    assert_eq!(pool.stats().loading, 1, "the joiner still wants the page");
    tx.send(()).unwrap();
    let (p, joined) = joiner.await.unwrap();
    assert_eq!((p[0], joined), (1, true), "the read its driver started");
    assert_eq!(loads.load(SeqCst), 1, "no second read");
    let s = pool.stats();
    assert_eq!((s.loading, s.pages, s.abandoned), (0, 1, 0));
    let (p, cached) = pool
        .get((FileId(0), 0), 4096, PageHint::Data, || unreachable!())
        .await
        .unwrap();
    assert_eq!((p[0], cached), (1, true));
}

/// A request that started a read may not be polled again for a long time (its operator
/// waits for room downstream, maybe for the very query that joined the read): the
/// joiners must get the page all the same.
#[tokio::test]
async fn a_joiner_gets_the_page_while_its_driver_is_not_polled() {
    let pool = BufferPool::new(1 << 20);
    let loads = Arc::new(AtomicUsize::new(0));
    let (tx, driver, joiner) = started_and_joined(&pool, &loads, |b| Ok(page(b))).await;
    tx.send(()).unwrap();
    let joined = tokio::time::timeout(std::time::Duration::from_secs(10), joiner).await;
    let (p, joined) = joined
        .expect("the joiner waited for a driver nobody polls")
        .unwrap();
    assert_eq!((p[0], joined), (1, true));
    drop(driver);
    assert_eq!(
        pool.stats().pages,
        1,
        "cached, and kept when the driver goes"
    );
}

#[tokio::test]
async fn a_failed_read_fails_its_joiners_and_leaves_no_entry() {
    let pool = BufferPool::new(1 << 20);
    let loads = Arc::new(AtomicUsize::new(0));
    let bad = |_| Err(StorageError::corrupted("f", Some(0), "bad checksum"));
    let (tx, driver, joiner) = started_and_joined(&pool, &loads, bad).await;
    tx.send(()).unwrap();
    for result in [driver.await, joiner.await] {
        let e = result.expect_err("the read failed");
        assert!(e.to_string().contains("bad checksum"), "{e}");
    }
    let s = pool.stats();
    assert_eq!((s.loading, s.pages, s.used_bytes), (0, 0, 0));
}

#[tokio::test]
async fn abandoned_reads_leave_no_entry() {
    let pool = BufferPool::new(1 << 20);
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let rx = rx.shared();
    let reads: Vec<_> = (0..3)
        .map(|_| {
            let rx = rx.clone();
            Box::pin(pool.get((FileId(0), 0), 4096, PageHint::Data, move || {
                async move {
                    let _ = rx.await;
                    Ok(page(1))
                }
                .boxed()
            }))
        })
        .collect();
    let mut reads: Vec<_> = reads.into_iter().map(Some).collect();
    for r in reads.iter_mut() {
        assert!(futures::poll!(r.as_mut().unwrap()).is_pending());
    }
    assert_eq!(pool.stats().loading, 1);
    assert_eq!(pool.stats().joined, 2);
    reads[0] = None;
    reads[1] = None;
    assert_eq!(pool.stats().loading, 1, "one waiter is left");
    reads[2] = None;
    let s = pool.stats();
    assert_eq!(
        (s.loading, s.pages, s.used_bytes, s.abandoned),
        (0, 0, 0, 1)
    );
    drop(tx);
    // The next request reads again.
    let (p, cached) = pool
        .get((FileId(0), 0), 4096, PageHint::Data, || {
            futures::future::ready(Ok(page(2))).boxed()
        })
        .await
        .unwrap();
    assert_eq!((p[0], cached), (2, false));
    assert_eq!(pool.stats().pages, 1);
}

#[tokio::test]
async fn memory_refused_means_eviction_and_is_given_back() {
    let memory = Arc::new(Limited {
        limit: 2 * GRANULE,
        ..Default::default()
    });
    let pool = BufferPool::with_memory(1 << 30, Some(memory.clone()));
    for i in 0..2000u64 {
        let (p, _) = pool
            .get((FileId(0), i * 4096), 4096, PageHint::Data, move || {
                futures::future::ready(Ok(page(i as u8))).boxed()
            })
            .await
            .unwrap();
        assert_eq!(p[0], i as u8);
        assert!(*memory.held.lock() <= 2 * GRANULE);
    }
    let s = pool.stats();
    assert!(s.used_bytes as usize <= 2 * GRANULE, "{s:?}");
    assert!(s.evictions > 0, "{s:?}");
    assert_eq!(s.reserved_bytes as usize, *memory.held.lock());
    pool.clear();
    assert!(*memory.held.lock() <= 2 * GRANULE);
    drop(pool);
    assert_eq!(*memory.held.lock(), 0, "all given back");
}

#[tokio::test]
async fn a_smaller_budget_evicts_at_once() {
    let pool = BufferPool::new(1 << 20);
    for i in 0..100u64 {
        pool.get((FileId(0), i * 4096), 4096, PageHint::Data, move || {
            futures::future::ready(Ok(page(0))).boxed()
        })
        .await
        .unwrap();
    }
    assert_eq!(pool.stats().used_bytes, 100 * 4096);
    pool.set_budget(10 * 4096);
    assert!(pool.stats().used_bytes <= 10 * 4096);
}
