//! Switches the server throws once (shutdown, killing a connection) and that hot paths check
//! on every poll.
//!
//! A `CancellationToken` alone is costly there: polling its future or asking
//! `is_cancelled` locks the token's node, and a watch's body, its connection's task and its
//! socket each did so for every frame. A [`Switch`] pairs the token with a flag stored before
//! the token is cancelled. A [`Signal`] checks the flags (its switch's and its ancestors')
//! with plain loads, and polls the token's future only to register the task, again only when
//! the task's waker changes. A thrown switch wakes the registered task through the token, and
//! that poll sees the flag.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Waker};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// A token with flags: its own first, then its ancestors'.
#[derive(Clone, Debug)]
pub(crate) struct Switch {
    token: CancellationToken,
    flags: Arc<[Arc<AtomicBool>]>,
}

impl Switch {
    pub(crate) fn new() -> Self {
        Switch {
            token: CancellationToken::new(),
            flags: Arc::new([Arc::new(AtomicBool::new(false))]),
        }
    }

    /// A switch thrown with this one, or by itself.
    pub(crate) fn child(&self) -> Self {
        let flags: Vec<Arc<AtomicBool>> = std::iter::once(Arc::new(AtomicBool::new(false)))
            .chain(self.flags.iter().cloned())
            .collect();
        Switch {
            token: self.token.child_token(),
            flags: flags.into(),
        }
    }

    /// Throws the switch (and its children).
    pub(crate) fn throw(&self) {
        // Release pairs with the Acquire loads in `is_thrown`: stored before the token wakes
        // the registered tasks, whose next poll must see it.
        self.flags[0].store(true, Ordering::Release);
        self.token.cancel();
    }

    /// Whether this switch or an ancestor was thrown.
    pub(crate) fn is_thrown(&self) -> bool {
        // Acquire pairs with the Release store in `throw`.
        self.flags.iter().any(|f| f.load(Ordering::Acquire))
    }

    /// The token, for code that only awaits it.
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Completes once the switch is thrown.
    pub(crate) async fn thrown(&self) {
        self.token.cancelled().await;
    }

    /// A cheap per-poll check of this switch, for one task.
    pub(crate) fn signal(&self) -> Signal {
        Signal {
            switch: self.clone(),
            registration: Box::pin(self.token.clone().cancelled_owned()),
            waker: None,
        }
    }
}

/// A task's view of a [`Switch`]; see the module docs.
#[derive(Debug)]
pub(crate) struct Signal {
    switch: Switch,
    registration: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The waker the registration was last polled with.
    waker: Option<Waker>,
}

impl Signal {
    /// Whether the switch was thrown; otherwise makes sure the task of `cx` is woken when it
    /// is (polling the token only if this task's waker is new to it).
    pub(crate) fn poll_thrown(&mut self, cx: &mut Context<'_>) -> bool {
        if self.switch.is_thrown() {
            return true;
        }
        if self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return false;
        }
        if self.registration.as_mut().poll(cx).is_ready() {
            return true;
        }
        self.waker = Some(cx.waker().clone());
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_signal_sees_its_switch_or_an_ancestor_thrown_and_wakes_its_task() {
        let root = Switch::new();
        let child = root.child();
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mut signal = child.signal();
        assert!(!signal.poll_thrown(&mut cx));
        // Polled again with the same waker: the token is not touched, nothing changes.
        assert!(!signal.poll_thrown(&mut cx));
        root.throw();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the registered task was woken");
        assert!(signal.poll_thrown(&mut cx));
        assert!(child.is_thrown() && root.is_thrown());

        let other = Switch::new();
        let sibling = other.child();
        let mut signal = other.signal();
        sibling.throw();
        assert!(!signal.poll_thrown(&mut cx), "a child's throw leaves the parent");
        assert!(sibling.is_thrown());
    }
}
