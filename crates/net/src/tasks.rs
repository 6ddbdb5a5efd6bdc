//! Counts live connection tasks so that shutdown can wait for them (bounded).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Clone, Default)]
pub struct Tracker(Arc<AtomicUsize>);

impl Tracker {
    pub fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        let me = self.0.clone();
        me.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            f.await;
            me.fetch_sub(1, Ordering::SeqCst);
        });
    }
    pub fn live(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
