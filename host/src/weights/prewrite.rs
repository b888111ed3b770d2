//! The thread that writes a plan's weights into an artifact's temp file
//! while the worker traces. What it writes, and how the emit step keeps it,
//! is the artifact format's (`graph::pt2::prewrite`, `onnx::prewrite`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A thread writing a plan's weights; stopped (its temp file removed with
/// what it wrote) when dropped unfinished.
pub struct Prewriter<T> {
    thread: Option<JoinHandle<Option<T>>>,
    stop: Arc<AtomicBool>,
}

impl<T: Send + 'static> Prewriter<T> {
    /// Runs `write` on a thread of its own; `write` stops early once the
    /// flag it is given is set.
    pub fn start(write: impl FnOnce(&AtomicBool) -> Option<T> + Send + 'static) -> Prewriter<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        match std::thread::Builder::new().name("hfx-prewrite".into()).spawn(move || write(&flag)) {
            Ok(thread) => Prewriter { thread: Some(thread), stop },
            Err(e) => {
                tracing::info!(
                    "weights are written at the emit step: no thread to write them earlier ({e})"
                );
                Prewriter { thread: None, stop }
            }
        }
    }

    /// What was written, once the thread is done; None if nothing was.
    pub fn finish(mut self) -> Option<T> {
        self.thread.take()?.join().ok().flatten()
    }
}

impl<T> Drop for Prewriter<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join(); // what it wrote, dropped unfinished, removes its temp file
        }
    }
}
