//! A node's work polled by its consumer (in-order mode): no task of its own.

use std::pin::Pin;
use std::task::{Context, Poll};

use arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use futures::Stream;
use futures::future::BoxFuture;
use tokio::sync::mpsc::Receiver;

/// The batches `work` sends to `rx`, the work driven by polling the stream. Dropping the
/// stream drops the work (a cancelled query leaves nothing running).
pub(crate) struct Inline {
    rx: Receiver<Result<RecordBatch>>,
    work: Option<BoxFuture<'static, Result<()>>>,
    /// The work's error, returned after the batches it sent before failing.
    error: Option<DataFusionError>,
}

impl Inline {
    pub(crate) fn new(
        rx: Receiver<Result<RecordBatch>>,
        work: BoxFuture<'static, Result<()>>,
    ) -> Self {
        Self {
            rx,
            work: Some(work),
            error: None,
        }
    }
}

impl Stream for Inline {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            // Batches already sent go first: the work may be waiting for room in the channel.
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(batch)) => return Poll::Ready(Some(batch)),
                Poll::Ready(None) => return Poll::Ready(this.error.take().map(Err)),
                Poll::Pending => {}
            }
            let Some(work) = this.work.as_mut() else {
                // The work ended but a sender it handed on lives: the channel wakes us.
                return Poll::Pending;
            };
            match work.as_mut().poll(cx) {
                Poll::Ready(done) => {
                    // Dropping the finished work drops its sender: the channel then ends.
                    this.work = None;
                    this.error = done.err();
                }
                Poll::Pending => return this.rx.poll_recv(cx),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int32Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use futures::{FutureExt, StreamExt};

    use super::*;

    fn batch(v: i32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![v]))]).unwrap()
    }

    fn values(batches: &[Result<RecordBatch>]) -> Vec<i32> {
        batches
            .iter()
            .map(|b| {
                let b = b.as_ref().unwrap();
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int32Array>()
                    .unwrap()
                    .value(0)
            })
            .collect()
    }

    #[tokio::test]
    async fn yields_every_batch_in_order_past_the_channel_capacity() {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let work = async move {
            for v in 0..10 {
                tx.send(Ok(batch(v))).await.unwrap();
            }
            Ok(())
        };
        let got: Vec<_> = Inline::new(rx, work.boxed()).collect().await;
        assert_eq!(values(&got), (0..10).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn an_error_of_the_work_ends_the_stream_after_its_batches() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let work = async move {
            tx.send(Ok(batch(1))).await.unwrap();
            Err(DataFusionError::Execution("page 7 is corrupt".into()))
        };
        let mut stream = Inline::new(rx, work.boxed());
        assert_eq!(values(&[stream.next().await.unwrap()]), vec![1]);
        let err = stream.next().await.unwrap().unwrap_err();
        assert!(err.to_string().contains("page 7 is corrupt"), "{err}");
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn dropping_the_stream_drops_the_work() {
        struct Dropped(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let work = async move {
            let _guard = guard;
            for v in 0.. {
                tx.send(Ok(batch(v))).await.unwrap();
            }
            Ok(())
        };
        let mut stream = Inline::new(rx, work.boxed());
        stream.next().await.unwrap().unwrap();
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
        drop(stream);
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
    }
}
