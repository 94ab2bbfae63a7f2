//! A lingering close for HTTP/2 connections. When h2 is done with a connection (after GOAWAY
//! and its last stream) it shuts the socket's write side; a frame the client sent meanwhile (a
//! window update for what it read) would then find the socket closed, and the kernel would
//! answer with a reset, which may discard what the client has not read yet, the end of its
//! last stream among it. So the connection is read and what comes discarded until the client
//! closes too, for at most [`LINGER`], in a task of its own.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The longest a closed connection is read for.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// A connection that lingers when dropped (see the module docs).
pub(crate) struct Linger<IO: AsyncRead + Unpin + Send + 'static> {
    io: Option<IO>,
}

impl<IO: AsyncRead + Unpin + Send + 'static> Linger<IO> {
    pub(crate) fn new(io: IO) -> Self {
        Linger { io: Some(io) }
    }

    fn io(&mut self) -> &mut IO {
        self.io.as_mut().expect("taken only on drop")
    }
}

impl<IO: AsyncRead + Unpin + Send + 'static> Drop for Linger<IO> {
    fn drop(&mut self) {
        let (Some(mut io), Ok(runtime)) = (self.io.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        runtime.spawn(async move {
            let mut sink = [0u8; 1024];
            let _ = tokio::time::timeout(LINGER, async {
                while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
        });
    }
}

impl<IO: AsyncRead + Unpin + Send + 'static> AsyncRead for Linger<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_read(cx, buf)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for Linger<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(IO::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_shutdown(cx)
    }
}
