//! LIST bodies: a header, the shared items joined by commas, and a footer.
//!
//! [`StreamingList`] hands the body out in chunks of at most `chunk_size` bytes as a
//! `Stream<Item = Result<Bytes, CodecError>>` that hyper can send as a body: it copies the
//! next pieces into a fresh chunk each time it is polled, so the consumer's pace is the
//! backpressure and the extra memory of a LIST in flight is the chunk being filled plus the
//! chunks the consumer still holds, whatever the number and size of the items. Items are read
//! from the snapshot one at a time ([`ListItems`] lends them); the only per-item work is a
//! memcpy. [`encode_list`] writes the same bytes into one buffer: the baseline.
//!
//! The header is the apiserver's: `{"kind":"PodList","apiVersion":"v1","metadata":
//! {"resourceVersion":"…","continue":"…","remainingItemCount":N},"items":[` with the optional
//! ListMeta fields omitted when empty; an empty list is `"items":[]`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use futures_core::Stream;
use watchcache_core::{Codec, CodecError, ListItems, ListResult, Revision, WireFormat};

use crate::protobuf;
use crate::resource::ResourceInfo;
use crate::write::{put_str, put_u64};

/// The default chunk size: 64 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;

const FOOTER: &[u8] = b"]}";

/// The ListMeta of a body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListHeader {
    /// `metadata.resourceVersion`.
    pub revision: Revision,
    /// `metadata.continue`, omitted when `None`.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`, omitted when `None`.
    pub remaining_item_count: Option<u64>,
}

impl ListHeader {
    /// The header of `result`.
    pub fn of(result: &ListResult) -> Self {
        ListHeader {
            revision: result.revision,
            continue_token: result.continue_token.clone(),
            remaining_item_count: result.remaining_item_count,
        }
    }

    /// Everything up to and including `"items":[`.
    pub fn encode(&self, info: &ResourceInfo) -> Bytes {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(br#"{"kind":"#);
        put_str(&mut out, &info.list_kind);
        out.extend_from_slice(br#","apiVersion":"#);
        put_str(&mut out, &info.api_version);
        out.extend_from_slice(br#","metadata":{"resourceVersion":""#);
        put_u64(&mut out, self.revision.get());
        out.push(b'"');
        if let Some(token) = &self.continue_token {
            out.extend_from_slice(br#","continue":"#);
            put_str(&mut out, token);
        }
        if let Some(n) = self.remaining_item_count {
            out.extend_from_slice(br#","remainingItemCount":"#);
            put_u64(&mut out, n);
        }
        out.extend_from_slice(br#"},"items":["#);
        Bytes::from(out)
    }
}

/// Builds the whole body in one buffer: the baseline the streaming encoder is compared with.
pub fn encode_list(
    info: &ResourceInfo,
    header: &ListHeader,
    mut items: ListItems,
    codec: &dyn Codec,
) -> Result<Vec<u8>, CodecError> {
    let mut out = header.encode(info).to_vec();
    let mut first = true;
    while let Some(item) = items.next_item() {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(item.encoding(WireFormat::Json, codec)?.bytes());
    }
    out.extend_from_slice(FOOTER);
    Ok(out)
}

#[derive(Debug)]
enum Next {
    Header,
    Items { first: bool },
    Footer,
    Done,
}

/// A piece of the body.
#[derive(Clone, Copy, Debug)]
enum Piece {
    Header,
    Item,
    Footer,
}

/// A LIST body as a stream of bounded chunks; see the module docs.
pub struct StreamingList {
    format: WireFormat,
    header: Bytes,
    footer: &'static [u8],
    items: ListItems,
    codec: Arc<dyn Codec>,
    chunk_size: usize,
    next: Next,
    /// A piece that did not fit in the last chunk, and how much of it has been copied. An
    /// item is lent again by `items` to finish it: cloning its bytes instead would write the
    /// reference count that every concurrent LIST of the same object shares (and promote a
    /// `Vec`-backed `Bytes`, an allocation kept for the object's life).
    pending: Option<(Piece, usize)>,
}

impl std::fmt::Debug for StreamingList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingList")
            .field("chunk_size", &self.chunk_size)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// Copies what fits of `bytes[done..]` into `chunk`; the new `done` if something is left.
fn copy_some(chunk: &mut BytesMut, limit: usize, bytes: &[u8], done: usize) -> Option<usize> {
    let n = (limit - chunk.len()).min(bytes.len() - done);
    chunk.put_slice(&bytes[done..done + n]);
    (done + n < bytes.len()).then_some(done + n)
}

/// [`copy_some`] over `head` then `tail`, as if they were one slice.
fn copy_two(chunk: &mut BytesMut, limit: usize, head: &[u8], tail: &[u8], done: usize) -> Option<usize> {
    if done < head.len() {
        match copy_some(chunk, limit, head, done) {
            Some(d) => return Some(d),
            None if tail.is_empty() => return None,
            None if chunk.len() == limit => return Some(head.len()),
            None => {}
        }
    }
    let offset = head.len();
    copy_some(chunk, limit, tail, done.max(offset) - offset).map(|d| d + offset)
}

/// The key and length that precede a protobuf list item (`items`, field 2) of `len` bytes.
fn item_prefix(len: usize) -> ([u8; 11], usize) {
    // The varint written by hand: this runs once per item of every protobuf LIST.
    let mut prefix = [0u8; 11];
    prefix[0] = 0x12;
    let mut v = len as u64;
    let mut n = 1;
    while v >= 0x80 {
        prefix[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    prefix[n] = v as u8;
    (prefix, n + 1)
}

/// The protobuf list header: the envelope's start, then `metadata` (ListMeta: selfLink,
/// resourceVersion, continue, and remainingItemCount when known). `items_len` is the size of
/// the items' fields, which the envelope's length prefix counts.
fn protobuf_header(info: &ResourceInfo, header: &ListHeader, items_len: usize) -> Bytes {
    let mut meta = Vec::with_capacity(64);
    meta.extend_from_slice(&[0x0a, 0x00, 0x12]);
    let mut digits = itoa::Buffer::new();
    let rv = digits.format(header.revision.get());
    meta.push(rv.len() as u8);
    meta.extend_from_slice(rv.as_bytes());
    let token = header.continue_token.as_deref().unwrap_or("");
    meta.push(0x1a);
    prost::encoding::encode_varint(token.len() as u64, &mut meta);
    meta.extend_from_slice(token.as_bytes());
    if let Some(n) = header.remaining_item_count {
        meta.push(0x20);
        prost::encoding::encode_varint(n, &mut meta);
    }
    let mut field = vec![0x0a];
    prost::encoding::encode_varint(meta.len() as u64, &mut field);
    field.extend_from_slice(&meta);
    let mut out = Vec::with_capacity(field.len() + 64);
    protobuf::envelope_prefix(
        &info.api_version,
        &info.list_kind,
        field.len() + items_len,
        &mut out,
    );
    out.extend_from_slice(&field);
    Bytes::from(out)
}

/// The size of the items' fields in a protobuf list: from the snapshot's item sizes (made once
/// per snapshot) when the items are an unfiltered key range, else a first pass over the items;
/// either makes each item's protobuf encoding if it was not made yet.
fn protobuf_items_len(items: &ListItems, codec: &dyn Codec) -> Result<usize, CodecError> {
    let field = |n: usize| item_prefix(n).1 + n;
    if let Some(len) = items.sum_encoded(WireFormat::Protobuf, codec, field)? {
        return Ok(len);
    }
    let mut items = items.clone();
    let mut len = 0;
    while let Some(item) = items.next_item() {
        let n = item.encoding(WireFormat::Protobuf, codec)?.bytes().len();
        len += item_prefix(n).1 + n;
    }
    Ok(len)
}

/// Builds the whole protobuf body (`k8s\0`, then a `runtime.Unknown` around the `…List`
/// message) in one buffer: the baseline the streaming encoder is compared with.
pub fn encode_protobuf_list(
    info: &ResourceInfo,
    header: &ListHeader,
    mut items: ListItems,
    codec: &dyn Codec,
) -> Result<Vec<u8>, CodecError> {
    let items_len = protobuf_items_len(&items, codec)?;
    let mut out = protobuf_header(info, header, items_len).to_vec();
    while let Some(item) = items.next_item() {
        let bytes = item.encoding(WireFormat::Protobuf, codec)?.bytes();
        let (prefix, n) = item_prefix(bytes.len());
        out.extend_from_slice(&prefix[..n]);
        out.extend_from_slice(bytes);
    }
    out.extend_from_slice(protobuf::ENVELOPE_SUFFIX);
    Ok(out)
}

impl StreamingList {
    /// The body of `header` and `items`, in chunks of at most `chunk_size` bytes (at least 1).
    pub fn new(
        info: &ResourceInfo,
        header: &ListHeader,
        items: ListItems,
        codec: Arc<dyn Codec>,
        chunk_size: usize,
    ) -> Self {
        StreamingList {
            format: WireFormat::Json,
            header: header.encode(info),
            footer: FOOTER,
            items,
            codec,
            chunk_size: chunk_size.max(1),
            next: Next::Header,
            pending: None,
        }
    }

    /// The body of a LIST result in chunks of [`DEFAULT_CHUNK_SIZE`].
    pub fn of(info: &ResourceInfo, result: ListResult, codec: Arc<dyn Codec>) -> Self {
        let header = ListHeader::of(&result);
        StreamingList::new(info, &header, result.items, codec, DEFAULT_CHUNK_SIZE)
    }

    /// Copies the rest of the pending piece into `chunk`, as much as fits.
    /// The protobuf form of the same list, Kubernetes' streaming protobuf LIST: the items'
    /// sizes are added up first (a pass over the items that also makes any protobuf encoding
    /// missing), so the envelope's length prefix can lead the body; then the header (the
    /// envelope's start and `metadata`), each item as field 2 with its length, and the
    /// envelope's end. Byte for byte what [`encode_protobuf_list`] builds.
    pub fn protobuf(
        info: &ResourceInfo,
        header: &ListHeader,
        items: ListItems,
        codec: Arc<dyn Codec>,
        chunk_size: usize,
    ) -> Result<Self, CodecError> {
        let items_len = protobuf_items_len(&items, &*codec)?;
        Ok(StreamingList {
            format: WireFormat::Protobuf,
            header: protobuf_header(info, header, items_len),
            footer: protobuf::ENVELOPE_SUFFIX,
            items,
            codec,
            chunk_size: chunk_size.max(1),
            next: Next::Header,
            pending: None,
        })
    }

    fn finish_pending(&mut self, chunk: &mut BytesMut, piece: Piece, done: usize) {
        let bytes: &[u8] = match piece {
            Piece::Header => &self.header,
            Piece::Footer => self.footer,
            // The item was encoded when it was started.
            Piece::Item => self
                .items
                .current()
                .and_then(|item| item.encoded(self.format))
                .map_or(&[], |e| e.bytes()),
        };
        self.pending = match (piece, self.format) {
            (Piece::Item, WireFormat::Protobuf) => {
                let (prefix, n) = item_prefix(bytes.len());
                copy_two(chunk, self.chunk_size, &prefix[..n], bytes, done)
            }
            _ => copy_some(chunk, self.chunk_size, bytes, done),
        }
        .map(|d| (piece, d));
    }

    /// Starts the next piece, copying as much as fits into `chunk` (which has room); false
    /// when the body is complete.
    fn advance(&mut self, chunk: &mut BytesMut) -> Result<bool, CodecError> {
        let limit = self.chunk_size;
        match self.next {
            Next::Header => {
                self.pending = copy_some(chunk, limit, &self.header, 0).map(|d| (Piece::Header, d));
                self.next = Next::Items { first: true };
            }
            Next::Items { mut first } => {
                // Items are copied straight from the snapshot, as many as fit; only one cut
                // by the chunk's end is lent again, by `finish_pending`.
                let codec = &*self.codec;
                let format = self.format;
                let mut cut = None;
                let mut error = None;
                let done = self.items.lend_while(|item| {
                    let bytes = match item.encoding(format, codec) {
                        Ok(encoding) => encoding.bytes(),
                        Err(e) => {
                            error = Some(e);
                            return false;
                        }
                    };
                    if format == WireFormat::Protobuf {
                        let (prefix, n) = item_prefix(bytes.len());
                        cut = if limit - chunk.len() > n {
                            // The prefix fits whole: one copy of it, then the item's.
                            chunk.extend_from_slice(&prefix[..n]);
                            copy_some(chunk, limit, bytes, 0).map(|d| d + n)
                        } else {
                            copy_two(chunk, limit, &prefix[..n], bytes, 0)
                        };
                        return cut.is_none() && chunk.len() < limit;
                    }
                    if !first {
                        chunk.put_u8(b',');
                    }
                    first = false;
                    cut = copy_some(chunk, limit, bytes, 0);
                    cut.is_none() && chunk.len() < limit
                });
                if let Some(e) = error {
                    return Err(e);
                }
                self.pending = cut.map(|d| (Piece::Item, d));
                self.next = if done { Next::Footer } else { Next::Items { first } };
            }
            Next::Footer => {
                self.pending = copy_some(chunk, limit, self.footer, 0).map(|d| (Piece::Footer, d));
                self.next = Next::Done;
            }
            Next::Done => return Ok(false),
        }
        Ok(true)
    }

    /// The next chunk, or `None` once the body is complete.
    pub fn next_chunk(&mut self) -> Option<Result<Bytes, CodecError>> {
        let mut chunk = BytesMut::with_capacity(self.chunk_size);
        loop {
            if chunk.len() == self.chunk_size {
                return Some(Ok(chunk.freeze()));
            }
            if let Some((piece, done)) = self.pending {
                self.finish_pending(&mut chunk, piece, done);
                continue;
            }
            match self.advance(&mut chunk) {
                Ok(true) => {}
                Ok(false) if chunk.is_empty() => return None,
                Ok(false) => return Some(Ok(chunk.freeze())),
                Err(e) => {
                    self.next = Next::Done;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl Stream for StreamingList {
    type Item = Result<Bytes, CodecError>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Pure copying: always ready. Backpressure is the consumer polling only when it can
        // take another chunk.
        Poll::Ready(self.get_mut().next_chunk())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, None)
    }
}
