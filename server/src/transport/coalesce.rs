//! Writes coalesced per poll of a connection's task. h2 flushes its socket whenever its
//! frame buffer holds a data frame larger than 256 bytes, so the frames of many streams
//! ready at once (an event fanned out to 100 watches of one connection) would each cost a
//! write. [`Coalesce`] collects what h2 writes and defers a flush that follows writes once:
//! it wakes the task instead, whose next poll (after h2 has buffered every frame then ready)
//! flushes it all in one write. A flush with nothing new written, or a buffer past
//! [`LIMIT`], goes to the socket at once. The buffer is allocated on the first write and
//! freed once written if it grew past [`KEEP`], so an idle connection holds none.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::AsyncWrite;

/// Past this, a flush writes at once.
pub(crate) const LIMIT: usize = 64 * 1024;
/// The most capacity kept once everything is written.
const KEEP: usize = 0;

pub(crate) struct Coalesce<IO> {
    inner: IO,
    buf: Vec<u8>,
    /// How much of `buf` is written.
    written: usize,
    /// Bytes came since the last flush.
    fresh: bool,
}

impl<IO> Coalesce<IO> {
    pub(crate) fn new(inner: IO) -> Self {
        Coalesce {
            inner,
            buf: Vec::new(),
            written: 0,
            fresh: false,
        }
    }
}

impl<IO: AsyncWrite + Unpin> Coalesce<IO> {
    /// Writes out the buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        if self.buf.capacity() > KEEP {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Coalesce<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Coalesce<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.buf.len() >= LIMIT {
            ready!(this.poll_drain(cx))?;
        }
        let mut n = 0;
        for b in bufs {
            this.buf.extend_from_slice(b);
            n += b.len();
        }
        this.fresh = true;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.fresh && this.buf.len() < LIMIT {
            // Once: the task's next poll flushes, after whatever else is ready then.
            this.fresh = false;
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        this.fresh = false;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    /// Counts the writes that reach it, and what they carried.
    #[derive(Default)]
    struct Counting {
        writes: usize,
        bytes: Vec<u8>,
    }

    impl AsyncWrite for Counting {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.writes += 1;
            self.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_writes_and_flushes_of_one_poll_reach_the_socket_in_one_write_at_the_next() {
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Counting::default());
        let mut io = Pin::new(&mut io);
        // One poll: h2 writes a frame per stream and flushes between them, as it does for data
        // frames past 256 bytes.
        for stream in 0..100u8 {
            assert!(matches!(
                io.as_mut().poll_write(&mut cx, &[stream; 300]),
                Poll::Ready(Ok(300))
            ));
            assert!(matches!(io.as_mut().poll_flush(&mut cx), Poll::Ready(Ok(()))));
        }
        assert_eq!(io.inner.writes, 0, "nothing written yet");
        assert!(wakes.0.load(Ordering::SeqCst) > 0, "the task is woken to flush");
        // The next poll: nothing new, so its flush writes.
        assert!(matches!(io.as_mut().poll_flush(&mut cx), Poll::Ready(Ok(()))));
        assert_eq!(io.inner.writes, 1, "one write for the 100 frames");
        assert_eq!(io.inner.bytes.len(), 30_000);
        assert_eq!(io.buf.capacity(), 0, "an idle connection holds no buffer");
    }

    #[test]
    fn a_full_buffer_is_written_at_once() {
        let waker = Waker::from(Arc::new(Wakes::default()));
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Counting::default());
        let mut io = Pin::new(&mut io);
        let big = vec![1u8; LIMIT];
        assert!(matches!(
            io.as_mut().poll_write(&mut cx, &big),
            Poll::Ready(Ok(_))
        ));
        assert!(matches!(io.as_mut().poll_flush(&mut cx), Poll::Ready(Ok(()))));
        assert_eq!(io.inner.writes, 1);
    }
}
