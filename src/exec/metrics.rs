//! What ooode nodes show in EXPLAIN ANALYZE: probes, pages read, buffer hits, reads in flight
//! (mean and max) and I/O time, from the node's I/O counters.

use std::sync::Arc;

use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder};

use crate::io::IoMetrics;

/// The EXPLAIN ANALYZE metrics of one ooode node.
#[derive(Debug, Clone)]
pub struct NodeMetrics {
    /// I/O counters of the node (all partitions).
    pub io: Arc<IoMetrics>,
    probes: Count,
    pages_read: Gauge,
    buffer_hits: Gauge,
    max_in_flight: Gauge,
    mean_in_flight_x100: Gauge,
    io_time_us: Gauge,
    /// An index join's heap page reads whose permits were asked of admission's queue (the
    /// others were started under a permit free at once or given back by the join's own
    /// reads): how often the join waited its turn among queries.
    heap_permits_queued: Option<Count>,
}

impl NodeMetrics {
    /// Registers the metrics in `set`.
    pub fn new(set: &ExecutionPlanMetricsSet, io: Arc<IoMetrics>) -> Self {
        Self {
            io,
            probes: MetricBuilder::new(set).global_counter("probes"),
            pages_read: MetricBuilder::new(set).global_gauge("pages_read"),
            buffer_hits: MetricBuilder::new(set).global_gauge("buffer_hits"),
            max_in_flight: MetricBuilder::new(set).global_gauge("max_reads_in_flight"),
            mean_in_flight_x100: MetricBuilder::new(set).global_gauge("mean_reads_in_flight_x100"),
            io_time_us: MetricBuilder::new(set).global_gauge("io_time_us"),
            heap_permits_queued: None,
        }
    }

    /// The metrics of an index join: [`Self::new`]'s and its heap page reads queued.
    pub fn for_join(set: &ExecutionPlanMetricsSet, io: Arc<IoMetrics>) -> Self {
        Self {
            heap_permits_queued: Some(
                MetricBuilder::new(set).global_counter("heap_permits_queued"),
            ),
            ..Self::new(set, io)
        }
    }

    /// Counts `n` heap page reads whose permits were asked of admission's queue.
    pub fn add_heap_permits_queued(&self, n: usize) {
        if let Some(count) = &self.heap_permits_queued {
            count.add(n);
        }
    }

    /// Counts index probes (B+tree lookups).
    pub fn add_probes(&self, n: usize) {
        self.probes.add(n);
    }

    /// Copies the I/O counters into the plan metrics (called as a stream ends).
    pub fn publish(&self) {
        let s = self.io.snapshot();
        self.pages_read.set(s.reads as usize);
        self.buffer_hits.set(s.hits as usize);
        self.max_in_flight.set(s.max_in_flight as usize);
        self.mean_in_flight_x100
            .set((s.mean_in_flight * 100.0) as usize);
        self.io_time_us.set(s.read_time.as_micros() as usize);
    }
}

/// A stream that publishes its node's metrics when it ends or is dropped.
pub struct Published<S> {
    inner: S,
    node: NodeMetrics,
}

impl<S> Published<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, node: NodeMetrics) -> Self {
        Self { inner, node }
    }
}

impl<S: futures::Stream + Unpin> futures::Stream for Published<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_next(cx);
        if let std::task::Poll::Ready(None) = polled {
            self.node.publish();
        }
        polled
    }
}

impl<S> Drop for Published<S> {
    fn drop(&mut self) {
        self.node.publish();
    }
}
