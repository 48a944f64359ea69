//! The I/O layer: every engine returns the same bytes as a plain read under heavy concurrency
//! with random cancellation; faults hit exactly the reads they target; the buffer pool keeps its
//! budget, reads each page once for concurrent requests, and evicts correctly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use object_store::ObjectStoreExt;
use ooode::access::{Counters, TableIo};
use ooode::io::{
    BufferPool, Fault, FaultyEngine, IoEngine, IoMetrics, ObjectStoreEngine, PageHint, SyncEngine,
    UringConfig, UringEngine,
};
use ooode::storage::{StorageError, Table};

const PAGE: usize = 8192;
const PAGES: u64 = 1500;

fn page_file(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut data = vec![0u8; PAGE * PAGES as usize];
    let mut x: u64 = 0x1234_5678;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    let path = dir.join("data.pages");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

fn engines(dir: &Path, data: &[u8]) -> Vec<Arc<dyn IoEngine>> {
    let store = Arc::new(object_store::memory::InMemory::new());
    futures::executor::block_on(store.put(&"data.pages".into(), data.to_vec().into())).unwrap();
    vec![
        Arc::new(
            UringEngine::new(UringConfig {
                max_in_flight: 256,
                ..Default::default()
            })
            .unwrap(),
        ),
        Arc::new(
            UringEngine::new(UringConfig {
                max_in_flight: 4096,
                ..Default::default()
            })
            .unwrap(),
        ),
        // Reads into registered buffers, carved from the recycler's arena.
        Arc::new(
            UringEngine::new(UringConfig {
                max_in_flight: 256,
                fixed_buffers: true,
                recycler: Some(ooode::io::buf::Recycler::with_arena(64 << 20)),
                ..Default::default()
            })
            .unwrap(),
        ),
        // Most reads wait in the engine's own queue for the device (and some are cancelled
        // there).
        Arc::new(
            UringEngine::new(UringConfig {
                max_in_flight: 4096,
                device_queue_depth: 4,
                ..Default::default()
            })
            .unwrap(),
        ),
        Arc::new(SyncEngine::new(true)),
        Arc::new(ObjectStoreEngine::new(store, dir, 256)),
    ]
}

async fn wait_idle(engine: &dyn IoEngine) {
    for _ in 0..500 {
        if engine.metrics().snapshot().in_flight == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{}: reads still in flight", engine.name());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_return_identical_pages_under_concurrency_and_cancellation() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = page_file(dir.path());
    for engine in engines(dir.path(), &data) {
        let file = engine.open(&path).unwrap();
        assert_eq!(engine.open(&path).unwrap(), file, "same path, same id");
        let mut tasks = Vec::new();
        for t in 0..64u64 {
            let engine = engine.clone();
            let data_page = |p: u64| data[p as usize * PAGE..(p as usize + 1) * PAGE].to_vec();
            let expect: Vec<(u64, Vec<u8>)> = (0..40)
                .map(|i| {
                    let p = (t * 7919 + i * 104_729) % PAGES;
                    (p, data_page(p))
                })
                .collect();
            tasks.push(tokio::spawn(async move {
                let mut cancelled = 0;
                // Many reads at once from this task, some abandoned before they complete.
                let mut reads: FuturesUnordered<_> = expect
                    .into_iter()
                    .enumerate()
                    .map(|(i, (p, want))| {
                        let read = engine.read(file, p * PAGE as u64, PAGE);
                        async move {
                            let mut read = read;
                            if i % 4 == 3 {
                                // Started (pushed to the kernel by the first poll), then
                                // dropped: cancelled in flight unless already complete.
                                match futures::poll!(&mut read) {
                                    std::task::Poll::Ready(page) => {
                                        assert_eq!(&page.unwrap()[..], &want[..]);
                                        0
                                    }
                                    std::task::Poll::Pending => 1,
                                }
                            } else {
                                assert_eq!(&read.await.unwrap()[..], &want[..], "page {p}");
                                0
                            }
                        }
                    })
                    .collect();
                while let Some(c) = reads.next().await {
                    cancelled += c;
                }
                cancelled
            }));
        }
        let mut cancelled = 0;
        for t in tasks {
            cancelled += t.await.unwrap();
        }
        if engine.name() == "io_uring" {
            assert!(cancelled > 0, "no read was cancelled in flight");
        }
        eprintln!(
            "{}: {cancelled} reads cancelled, {:?}",
            engine.name(),
            engine.metrics().snapshot()
        );
        wait_idle(engine.as_ref()).await;
        // Pages read after the cancellations are still right: no buffer was reused too early.
        for p in (0..PAGES).step_by(97) {
            let page = engine.read(file, p * PAGE as u64, PAGE).await.unwrap();
            assert_eq!(&page[..], &data[p as usize * PAGE..(p as usize + 1) * PAGE]);
        }
        let snap = engine.metrics().snapshot();
        if engine.name() == "io_uring" {
            assert!(
                snap.max_in_flight > 8,
                "io_uring reached only {} in flight",
                snap.max_in_flight
            );
        }
        if engine.name() == "sync" {
            // A synchronous read at a time per calling thread (two runtime workers here).
            assert!(
                snap.max_in_flight <= 2,
                "the synchronous engine had {} in flight",
                snap.max_in_flight
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_hit_exactly_their_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = page_file(dir.path());
    let inner: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig::default()).unwrap());
    let engine = Arc::new(FaultyEngine::new(inner));
    let file = engine.open(&path).unwrap();
    engine.inject(&path, 3 * PAGE as u64, Fault::Error(libc::EIO));
    engine.inject(&path, 5 * PAGE as u64, Fault::ShortRead(100));
    engine.inject(
        &path,
        7 * PAGE as u64,
        Fault::Delay(Duration::from_millis(30)),
    );
    let reads: Vec<_> = (0..200u64)
        .map(|p| (p, engine.read(file, p * PAGE as u64, PAGE)))
        .collect();
    let results = tokio::time::timeout(Duration::from_secs(20), async {
        let mut out = Vec::new();
        for (p, r) in reads {
            out.push((p, r.await));
        }
        out
    })
    .await
    .expect("reads hung");
    for (p, r) in results {
        match p {
            3 => {
                let msg = r.unwrap_err().to_string();
                assert!(
                    msg.contains("data.pages") && msg.contains("Input/output error"),
                    "{msg}"
                );
            }
            5 => {
                let msg = r.unwrap_err().to_string();
                assert!(
                    msg.contains("data.pages") && msg.contains("short read"),
                    "{msg}"
                );
            }
            _ => assert_eq!(
                &r.unwrap()[..],
                &data[p as usize * PAGE..(p as usize + 1) * PAGE]
            ),
        }
    }
}

fn small_table(dir: &Path) -> Arc<Table> {
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..50_000)),
            Arc::new(Int64Array::from_iter_values((0..50_000).map(|i| i % 100))),
        ],
    )
    .unwrap();
    let options = ooode::storage::LoadOptions {
        clustering_key: vec!["k".into()],
        indexes: vec![vec!["v".into()]],
        ..Default::default()
    };
    ooode::storage::load_batches(dir.join("t"), schema, [Ok::<_, String>(batch)], options).unwrap();
    Arc::new(Table::open(dir.join("t")).unwrap())
}

/// An io_uring engine behind a fault injector: heap page 2 of the table in `dir` comes back
/// with a flipped byte, page 4 short (see [`check_heap_read`]).
fn damaging_engine(dir: &Path) -> (Arc<FaultyEngine>, PathBuf) {
    let inner: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig::default()).unwrap());
    let faulty = Arc::new(FaultyEngine::new(inner));
    let heap = dir.join("t/heap.0.pages");
    faulty.inject(&heap, 2 * PAGE as u64, Fault::Corrupt(1000));
    faulty.inject(&heap, 4 * PAGE as u64, Fault::ShortRead(10));
    (faulty, heap)
}

/// A read of heap page `p` through [`damaging_engine`]: pages 2 and 4 fail, naming the file,
/// the page and the damage; every other page is what is on disk.
fn check_heap_read(table: &Table, p: u64, r: ooode::storage::Result<ooode::io::PageBuf>) {
    match p {
        2 => {
            let e = r.unwrap_err();
            assert!(
                matches!(e, StorageError::Corrupted { page: Some(2), .. }),
                "{e}"
            );
            assert!(e.to_string().contains("heap.0.pages") && e.to_string().contains("checksum"));
        }
        4 => {
            let e = r.unwrap_err();
            assert!(
                matches!(e, StorageError::Corrupted { page: Some(4), .. }),
                "{e}"
            );
            assert!(e.to_string().contains("truncated"), "{e}");
        }
        _ => assert_eq!(
            &r.unwrap()[..],
            &table.heap().read_page(p).unwrap()[..],
            "page {p}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_io_verifies_pages_and_names_damage() {
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path());
    let (faulty, _) = damaging_engine(dir.path());
    let io = TableIo::open(table.clone(), faulty.clone(), BufferPool::new(1 << 20)).unwrap();
    let m = Counters::one(IoMetrics::new());
    for p in 0..table.manifest().heap_pages {
        check_heap_read(&table, p, io.heap_page(p, &m).await);
    }
    // A failed read is not cached: once the fault is gone the page reads fine.
    faulty.clear();
    assert!(io.heap_page(2, &m).await.is_ok());
    // Index pages come through the same path.
    let idx = &table.indexes()[1];
    let root = io.index_page(0, 1, idx.meta.tree.root, &m).await.unwrap();
    assert_eq!(
        &root[..],
        &idx.segment.read_page(idx.meta.tree.root).unwrap()[..]
    );
}

/// Reads node `page` of index `index` damaged once, then whole twice, emptying the pool before
/// each: page reads of the two whole rounds.
async fn reads_after_damage_and_emptied_pool(
    table: &Arc<Table>,
    index: usize,
    page: u64,
) -> (TableIo, Arc<BufferPool>, [u64; 2]) {
    let idx = &table.indexes()[index];
    let inner: Arc<dyn IoEngine> = Arc::new(SyncEngine::new(false));
    let faulty = Arc::new(FaultyEngine::new(inner));
    let file = idx.segment.striping().file(&idx.meta.segment, 0);
    faulty.inject(&file, page * PAGE as u64, Fault::Corrupt(100));
    let pool = BufferPool::new(1 << 20);
    let io = TableIo::open(table.clone(), faulty.clone(), pool.clone()).unwrap();
    let m = IoMetrics::new();
    let metrics = &Counters::one(m.clone());
    let e = io.index_page(0, index, page, metrics).await.unwrap_err();
    assert!(matches!(e, StorageError::Corrupted { .. }), "{e}");
    faulty.clear();
    let mut reads = [0; 2];
    for r in &mut reads {
        pool.clear();
        let before = m.snapshot().reads;
        io.index_page(0, index, page, metrics).await.unwrap();
        *r = m.snapshot().reads - before;
    }
    (io, pool, reads)
}

/// Inner B+tree nodes, and every node of a sparse clustering index, stay with the table when
/// the pool is emptied (a dense index's leaves and data pages do not); a damaged node is an
/// error and is not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_nodes_that_outlive_an_emptied_pool() {
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path());
    let none = &Counters::default();
    // Dense index on v: its inner root stays, its leaves do not.
    let tree = &table.indexes()[1].meta.tree;
    assert!(tree.root >= tree.leaf_pages, "the test needs an inner root");
    let (io, pool, reads) = reads_after_damage_and_emptied_pool(&table, 1, tree.root).await;
    // Round 0 reads the root (its damaged copy was not kept); round 1 finds it kept.
    assert_eq!(reads, [1, 0]);
    assert!(io.cached_index_page(0, 1, tree.root, none).is_some());
    io.index_page(0, 1, 0, none).await.unwrap();
    pool.clear();
    assert!(
        io.cached_index_page(0, 1, 0, none).is_none(),
        "a dense leaf"
    );
    // Sparse clustering index on k: its leaf stays too.
    assert!(table.indexes()[0].meta.is_sparse());
    let (io, pool, reads) = reads_after_damage_and_emptied_pool(&table, 0, 0).await;
    assert_eq!(reads, [1, 0]);
    pool.clear();
    assert!(
        io.cached_index_page(0, 0, 0, none).is_some(),
        "a sparse leaf"
    );
}

/// `load_pinned` reads every node that stays with the table in one read per run of
/// consecutive nodes, verified; a damaged run is an error and pins nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_nodes_load_in_few_large_reads() {
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path());
    let (sparse, dense) = (&table.indexes()[0], &table.indexes()[1]);
    assert!(sparse.meta.is_sparse() && !dense.meta.is_sparse());
    let inner_nodes = dense.segment.pages() - dense.meta.tree.leaf_pages;
    assert!(inner_nodes > 0, "the test needs inner nodes");
    let engine: Arc<dyn IoEngine> = Arc::new(SyncEngine::new(false));
    let faulty = Arc::new(FaultyEngine::new(engine.clone()));
    let dense_file = dense.segment.striping().file(&dense.meta.segment, 0);
    let first_inner = dense.meta.tree.leaf_pages * PAGE as u64;
    faulty.inject(&dense_file, first_inner, Fault::Corrupt(100));
    let pool = BufferPool::new(1 << 20);
    let io = TableIo::open(table.clone(), faulty.clone(), pool.clone()).unwrap();
    let e = io.load_pinned().await.unwrap_err();
    assert!(
        matches!(e, StorageError::Corrupted { .. }) && e.to_string().contains(&dense.meta.segment),
        "{e}"
    );
    let none = &Counters::default();
    assert!(
        io.cached_index_page(0, 1, dense.meta.tree.root, none)
            .is_none()
    );
    faulty.clear();
    let before = engine.metrics().snapshot().reads;
    let pinned = io.load_pinned().await.unwrap() as u64;
    // The sparse index may have been pinned by the first call (its run was whole).
    let sparse_pages = sparse.segment.pages();
    assert!(
        pinned == inner_nodes || pinned == inner_nodes + sparse_pages,
        "{pinned}"
    );
    assert!(engine.metrics().snapshot().reads - before <= 2);
    // Every kept node is there with the pool empty; a dense leaf is not.
    pool.clear();
    for p in dense.meta.tree.leaf_pages..dense.segment.pages() {
        let page = io
            .cached_index_page(0, 1, p, none)
            .expect("inner node pinned");
        assert_eq!(&page[..], &dense.segment.read_page(p).unwrap()[..]);
    }
    for p in 0..sparse_pages {
        assert!(
            io.cached_index_page(0, 0, p, none).is_some(),
            "sparse node {p}"
        );
    }
    assert!(io.cached_index_page(0, 1, 0, none).is_none());
    let before = engine.metrics().snapshot().reads;
    assert_eq!(io.load_pinned().await.unwrap(), 0);
    assert_eq!(engine.metrics().snapshot().reads, before);
}

/// The optimizer's range counts read through the query's engine and pool, and only inner
/// nodes (which stay pinned): the leaves where a range starts and ends are estimated.
#[test]
fn planning_counts_read_inner_nodes_only() {
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, FieldRef};
    use datafusion::execution::memory_pool::UnboundedMemoryPool;
    use ooode::access::plan_time::count_ranges_now;
    use ooode::access::{OoodeRuntime, QueryIo};
    use ooode::config::{ExecutionMode, OoodeConfig};
    use ooode::storage::{KeyEncoder, KeyRange};
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path());
    let field: FieldRef = Arc::new(Field::new("v", DataType::Int64, false));
    let encoder = KeyEncoder::new(&[field]).unwrap();
    let key = |v: i64| {
        encoder
            .encode_row(&[Arc::new(Int64Array::from(vec![v]))], 0)
            .unwrap()
    };
    if let Err(why) = ooode::io::uring_available() {
        panic!("this test needs io_uring, which is not available here: {why}");
    }
    let runtime = Arc::new(OoodeRuntime::new(Arc::new(UnboundedMemoryPool::default())));
    let config = OoodeConfig::default();
    let query = QueryIo::new(&runtime, &config);
    let engine = runtime.engine(ExecutionMode::OutOfOrder, true);
    let io = TableIo::open(table.clone(), engine.clone(), runtime.pool().clone()).unwrap();
    let node = IoMetrics::new();
    let reads = || node.snapshot().reads;
    // v = i % 100 over 50,000 rows: 500 per value.
    let ranges = [KeyRange::point(key(7)), KeyRange::point(key(8))];
    let tree = table.indexes()[1].meta.tree;
    assert!(
        tree.height >= 2,
        "the test needs leaves under an inner node"
    );
    // An estimate is off by at most a leaf's entries at each end of each range.
    let leaf = tree.entries.div_ceil(tree.leaf_pages);
    let near = |got: u64, want: u64, ranges: u64| {
        assert!(
            got.abs_diff(want) <= 2 * ranges * leaf,
            "estimated {got}, exactly {want} ({leaf} entries a leaf)"
        );
    };
    let cold = count_ranges_now(&io, 1, &ranges, &query, node.clone()).unwrap();
    near(cold, 1000, 2);
    assert!(
        reads() > 0,
        "a cold count reads its inner nodes through the engine"
    );
    assert!(
        reads() <= tree.pages - tree.leaf_pages,
        "a count reads no leaf: {} reads, {} inner nodes",
        reads(),
        tree.pages - tree.leaf_pages
    );
    assert_eq!(engine.name(), "io_uring", "this test needs io_uring");
    // The inner nodes stay pinned: a count over an emptied pool reads nothing, and finds the
    // same estimate.
    runtime.pool().clear();
    let before = reads();
    assert_eq!(
        count_ranges_now(&io, 1, &ranges, &query, node.clone()).unwrap(),
        cold
    );
    assert_eq!(reads(), before);
    assert!(count_ranges_now(&io, 9, &ranges, &query, node.clone()).is_err());
    // Open ranges count too.
    let below = KeyRange {
        lower: std::ops::Bound::Unbounded,
        upper: std::ops::Bound::Excluded(key(10)),
    };
    let before = query.own_counts();
    near(
        count_ranges_now(&io, 1, &[below], &query, node).unwrap(),
        5000,
        1,
    );
    assert_eq!(
        query.own_counts(),
        before + 1,
        "each count the rule makes itself noted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_single_flight_and_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = page_file(dir.path());
    let inner: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig::default()).unwrap());
    let engine = Arc::new(FaultyEngine::new(inner.clone()));
    let file = engine.open(&path).unwrap();
    engine.inject(
        &path,
        9 * PAGE as u64,
        Fault::Delay(Duration::from_millis(100)),
    );
    let pool = BufferPool::new(10 * PAGE);

    // 100 concurrent requests of one slow page: one read.
    let before = inner.metrics().snapshot().reads;
    let gets: Vec<_> = (0..100)
        .map(|_| {
            let (pool, engine) = (pool.clone(), engine.clone());
            tokio::spawn(async move {
                let e = engine.clone();
                pool.get((file, 9 * PAGE as u64), PAGE, PageHint::Data, move || {
                    e.read(file, 9 * PAGE as u64, PAGE)
                })
                .await
                .unwrap()
                .0
            })
        })
        .collect();
    for g in gets {
        assert_eq!(&g.await.unwrap()[..], &data[9 * PAGE..10 * PAGE]);
    }
    assert_eq!(inner.metrics().snapshot().reads - before, 1);
    let s = pool.stats();
    assert_eq!((s.misses, s.joined + s.hits), (1, 99));

    // Many tasks over more pages than fit: right bytes, budget never exceeded.
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let (pool, engine, data) = (pool.clone(), engine.clone(), data.clone());
            tokio::spawn(async move {
                for i in 0..400u64 {
                    let p = (t * 31 + i * 17) % 100;
                    let off = p * PAGE as u64;
                    let hint = if p % 10 == 0 {
                        PageHint::IndexInner
                    } else {
                        PageHint::Data
                    };
                    let e = engine.clone();
                    let (page, _) = pool
                        .get((file, off), PAGE, hint, move || e.read(file, off, PAGE))
                        .await
                        .unwrap();
                    assert_eq!(&page[..], &data[off as usize..off as usize + PAGE]);
                    assert!(pool.stats().used_bytes as usize <= 10 * PAGE);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let s = pool.stats();
    assert!(s.peak_bytes as usize <= 10 * PAGE, "peak {}", s.peak_bytes);
    // 100 pages through a pool of 10: evictions are certain (whether the tasks also hit each
    // other's pages depends on how they interleave, so hits are checked below, alone).
    assert!(s.evictions > 0, "no evictions: {s:?}");
    pool.clear();
    assert_eq!(pool.stats().used_bytes, 0);

    // A page asked for again is served from the pool.
    let hits = pool.stats().hits;
    for _ in 0..2 {
        let e = engine.clone();
        let (page, _) = pool
            .get((file, 0), PAGE, PageHint::Data, move || {
                e.read(file, 0, PAGE)
            })
            .await
            .unwrap();
        assert_eq!(&page[..], &data[..PAGE]);
    }
    assert_eq!(pool.stats().hits, hits + 1);
}

/// Under a stream of heap pages, B+tree inner nodes touched now and then stay cached, while
/// the same pages without the hint are evicted.
#[tokio::test]
async fn inner_node_hint_resists_scan_pressure() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = page_file(dir.path());
    let engine: Arc<dyn IoEngine> = Arc::new(SyncEngine::new(false));
    let file = engine.open(&path).unwrap();
    let mut misses = Vec::new();
    for hint in [PageHint::IndexInner, PageHint::Data] {
        let pool = BufferPool::new(16 * PAGE);
        let get = |p: u64, h: PageHint| {
            let (pool, engine) = (pool.clone(), engine.clone());
            async move {
                let off = p * PAGE as u64;
                pool.get((file, off), PAGE, h, move || engine.read(file, off, PAGE))
                    .await
                    .unwrap()
                    .1
            }
        };
        let mut missed = 0;
        for round in 0..40u64 {
            for inner in 0..4 {
                if !get(1000 + inner, hint).await && round > 0 {
                    missed += 1;
                }
            }
            for d in 0..12 {
                get(round * 12 + d, PageHint::Data).await;
            }
        }
        misses.push(missed);
    }
    assert_eq!(misses[0], 0, "inner nodes were evicted");
    assert!(misses[1] > 0, "the scan did not pressure the pool");
}

/// An engine made inside a tokio runtime takes its completions on that runtime's reactor; when
/// the runtime is gone, a thread takes over, and reads from elsewhere still complete.
#[test]
fn reads_outlive_the_runtime_whose_reactor_reaped_them() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = page_file(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engine = rt.block_on(async {
        UringEngine::new(UringConfig::default())
            .expect("this test needs io_uring, which is not available here")
    });
    assert!(engine.reaps_on_reactor());
    let file = engine.open(&path).unwrap();
    let page = rt
        .block_on(engine.read(file, 3 * PAGE as u64, PAGE))
        .unwrap();
    assert_eq!(&page[..], &data[3 * PAGE..4 * PAGE]);
    drop(rt);
    // No runtime at all now: a plain thread waits for the read.
    let page = futures::executor::block_on(engine.read(file, 5 * PAGE as u64, PAGE)).unwrap();
    assert_eq!(&page[..], &data[5 * PAGE..6 * PAGE]);
    assert!(!engine.reaps_on_reactor());
}

/// A lookup that goes on from a descent made ahead of it (through the pinned nodes, see
/// `descend_ahead`) finds what a lookup from the root finds, and counts the same hits; where
/// the walk leaves the pinned nodes (a dense index's leaves) both give up alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_descended_ahead_find_what_lookups_from_the_root_find() {
    use ooode::access::steps::{descend_ahead, lookup_cached};
    use ooode::storage::KeyEncoder;
    use ooode::storage::btree::KeyRange;
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path());
    let engine: Arc<dyn IoEngine> = Arc::new(SyncEngine::new(false));
    let io = TableIo::open(table.clone(), engine, BufferPool::new(1 << 20)).unwrap();
    io.load_pinned().await.unwrap();
    let schema = table.schema();
    let encoder = KeyEncoder::new(&[schema.fields()[0].clone()]).unwrap();
    let keys: Vec<i64> = vec![-5, 0, 1, 17, 4_999, 25_000, 49_999, 50_000, 1 << 40];
    let keys = arrow::array::Int64Array::from(keys);
    let encoded = encoder.encode_rows(&[Arc::new(keys)]).unwrap();
    let mut found_any = false;
    for (index, max) in [(0, 256), (1, 1_000)] {
        for key in &encoded {
            let range = Arc::new(KeyRange::prefix(key.clone()));
            let (plain, ahead) = (
                Arc::new(IoMetrics::default()),
                Arc::new(IoMetrics::default()),
            );
            let plain_counters = Counters::one(plain.clone());
            let from_root = lookup_cached(&io, index, &range, &plain_counters, max, None, vec![])
                .unwrap()
                .found();
            let descended = descend_ahead(&io, index, &range);
            assert!(descended.is_some(), "the nodes parse");
            let went_on = lookup_cached(
                &io,
                index,
                &range,
                &Counters::one(ahead.clone()),
                max,
                descended,
                // A vector reused from an earlier probe: its old ids are not among the new.
                vec![u64::MAX; 3],
            )
            .unwrap()
            .found();
            assert_eq!(from_root, went_on, "index {index}, key {key:?}");
            assert_eq!(plain.snapshot().hits, ahead.snapshot().hits);
            found_any |= from_root.is_some_and(|ids| !ids.is_empty());
        }
    }
    assert!(found_any, "some lookup found rows");
}

/// Heap pages read into an inbox (no future per read): each ends there once, verified, with
/// damage named; the pool caches the good pages, forgets the failed ones and is left with no
/// read in flight; the counters see every read end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heap_reads_end_in_the_inbox_verified_and_cached() {
    use ooode::access::heap_reads::{HeapInbox, Start};
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path());
    let (faulty, heap) = damaging_engine(dir.path());
    faulty.inject(
        &heap,
        5 * PAGE as u64,
        Fault::Delay(Duration::from_millis(30)),
    );
    let pool = BufferPool::new(1 << 24);
    let io = Arc::new(TableIo::open(table.clone(), faulty.clone(), pool.clone()).unwrap());
    assert!(io.engine().starts_reads());
    let metrics = IoMetrics::new();
    let inbox = HeapInbox::new(io.clone(), Counters::one(metrics.clone()));
    let pages = table.manifest().heap_pages;
    assert!(pages > 6, "the table has {pages} heap pages");
    for p in 0..pages {
        assert!(matches!(inbox.start(p), Start::Started), "page {p}");
    }
    assert!(
        matches!(inbox.start(pages), Start::Unavailable),
        "past the end"
    );
    let mut ended = Vec::new();
    let mut batch = Vec::new();
    while (ended.len() as u64) < pages {
        futures::future::poll_fn(|cx| inbox.poll_ended(cx, &mut batch)).await;
        ended.append(&mut batch);
    }
    ended.sort_by_key(|(p, _)| *p);
    for (p, result) in ended {
        check_heap_read(&table, p, result);
    }
    let stats = pool.stats();
    assert_eq!(stats.loading, 0);
    assert_eq!(stats.pages, pages - 2, "the failed pages are not cached");
    let snap = metrics.snapshot();
    assert_eq!((snap.reads, snap.in_flight, snap.errors), (pages, 0, 2));
    // Cached now: a hit, no read; a failed page is read again.
    assert!(matches!(inbox.start(3), Start::Cached(_)));
    assert!(matches!(inbox.start(2), Start::Started));
}

/// Reads an inbox started end their pool entries even when the inbox's owner is gone (a
/// cancelled query): the pages are cached, nothing is left loading or in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heap_reads_whose_reader_left_still_end() {
    use ooode::access::heap_reads::{HeapInbox, Start};
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path());
    let inner: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig::default()).unwrap());
    let faulty = Arc::new(FaultyEngine::new(inner));
    let heap = dir.path().join("t/heap.0.pages");
    for p in 0..4 {
        faulty.inject(
            &heap,
            p * PAGE as u64,
            Fault::Delay(Duration::from_millis(50)),
        );
    }
    let pool = BufferPool::new(1 << 24);
    let io = Arc::new(TableIo::open(table.clone(), faulty.clone(), pool.clone()).unwrap());
    let metrics = IoMetrics::new();
    let inbox = HeapInbox::new(io.clone(), Counters::one(metrics.clone()));
    for p in 0..4 {
        assert!(matches!(inbox.start(p), Start::Started));
    }
    drop(inbox);
    assert!(pool.stats().loading > 0, "the reads are still delayed");
    // A request for one of them waits for that read, not a read of its own.
    let page = io
        .heap_page(1, &Counters::one(IoMetrics::new()))
        .await
        .unwrap();
    assert_eq!(&page[..], &table.heap().read_page(1).unwrap()[..]);
    for _ in 0..200 {
        if pool.stats().loading == 0 && metrics.snapshot().in_flight == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = pool.stats();
    assert_eq!((stats.loading, stats.pages, stats.misses), (0, 4, 4));
    assert_eq!(metrics.snapshot().in_flight, 0);
}
