//! Plaintext HTTP/2 with prior knowledge (h2c): a connection that starts with HTTP/2's
//! connection preface is HTTP/2, any other is HTTP/1. The bytes read to decide are given back
//! to whichever protocol serves the connection ([`Prefixed`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// What every HTTP/2 connection starts with (RFC 9113, section 3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads until the first bytes either differ from the preface or are the preface: the
/// connection, with what was read put back, and whether it is HTTP/2.
pub(crate) async fn sniff<IO: AsyncRead + Unpin>(mut io: IO) -> io::Result<(Prefixed<IO>, bool)> {
    let mut buf = [0u8; PREFACE.len()];
    let mut n = 0;
    let h2 = loop {
        let read = io.read(&mut buf[n..]).await?;
        n += read;
        if read == 0 || buf[..n] != PREFACE[..n] {
            break false;
        }
        if n == PREFACE.len() {
            break true;
        }
    };
    Ok((
        Prefixed {
            prefix: buf,
            start: 0,
            end: n,
            inner: io,
        },
        h2,
    ))
}

/// A connection whose first bytes were read already: they are read again first.
pub(crate) struct Prefixed<IO> {
    prefix: [u8; PREFACE.len()],
    start: usize,
    end: usize,
    inner: IO,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.start < self.end {
            let n = (self.end - self.start).min(buf.remaining());
            let start = self.start;
            buf.put_slice(&self.prefix[start..start + n]);
            self.start += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sniffed(bytes: &[u8]) -> (bool, Vec<u8>) {
        let (mut io, h2) = sniff(bytes).await.unwrap();
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        (h2, all)
    }

    #[tokio::test]
    async fn the_preface_is_http2_anything_else_http1_and_every_byte_is_read_again() {
        let mut h2 = PREFACE.to_vec();
        h2.extend_from_slice(b"\0\0\0\x04");
        assert_eq!(sniffed(&h2).await, (true, h2.clone()));
        let get = b"GET /api HTTP/1.1\r\n\r\n";
        assert_eq!(sniffed(get).await, (false, get.to_vec()));
        assert_eq!(
            sniffed(b"PRI * HTTP/1.1").await,
            (false, b"PRI * HTTP/1.1".to_vec())
        );
        assert_eq!(sniffed(b"PRI").await, (false, b"PRI".to_vec()));
        assert_eq!(sniffed(b"").await, (false, Vec::new()));
    }
}
