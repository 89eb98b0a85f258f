//! A minimal, zero-copy protobuf wire-format reader and writer.
//!
//! [`Scan`] is the reader of the GraphDef decoder (`flatdecode`): every read
//! is bounds-checked, and malformed input gives a [`Malformed`] that says
//! what is wrong and where (a [`Fault`] and the address of the offending
//! bytes), never a panic; no length read from the input is
//! trusted before it is checked against the bytes that remain. [`Writer`]
//! serves the synthetic generator and tests. [`Reader`], the reader of the
//! reference decoder (`graphdef`), is kept as a test oracle only.

#[cfg(any(test, feature = "testing"))]
use crate::error::{PlanError, Result};

/// Protobuf wire types.
pub(crate) const VARINT: u8 = 0;
pub(crate) const FIXED64: u8 = 1;
pub(crate) const LEN: u8 = 2;
pub(crate) const FIXED32: u8 = 5;

/// A cursor over a protobuf message (the reference decoder's).
#[cfg(any(test, feature = "testing"))]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

#[cfg(any(test, feature = "testing"))]
impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    #[inline]
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64> {
        // One-byte varints (keys, small lengths and sizes) are most of them.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(err_at(self.pos, "truncated varint"));
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(err_at(self.pos, "varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(err_at(self.pos, "varint longer than 10 bytes"))
    }

    /// Reads a field key: (field number, wire type).
    #[inline]
    pub(crate) fn key(&mut self) -> Result<(u32, u8)> {
        let k = self.varint()?;
        let field = k >> 3;
        if field == 0 || field > u64::from(u32::MAX >> 3) {
            return Err(err_at(self.pos, "invalid field number"));
        }
        Ok((field as u32, (k & 7) as u8))
    }

    /// Reads a length-delimited payload.
    #[inline]
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = self.varint()?;
        let remaining = (self.buf.len() - self.pos) as u64;
        if len > remaining {
            return Err(err_at(
                self.pos,
                &format!("declared length {len} exceeds the {remaining} bytes that remain"),
            ));
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok(&self.buf[start..self.pos])
    }

    #[inline]
    pub(crate) fn str(&mut self) -> Result<&'a str> {
        let at = self.pos;
        let b = self.bytes()?;
        std::str::from_utf8(b).map_err(|_| err_at(at, "string field is not valid UTF-8"))
    }

    /// Skips a field of the given wire type.
    pub(crate) fn skip(&mut self, wire: u8) -> Result<()> {
        match wire {
            VARINT => self.varint().map(|_| ()),
            FIXED64 => self.advance(8),
            LEN => self.bytes().map(|_| ()),
            FIXED32 => self.advance(4),
            _ => Err(err_at(self.pos, &format!("unsupported wire type {wire}"))),
        }
    }

    fn advance(&mut self, n: usize) -> Result<()> {
        if self.buf.len() - self.pos < n {
            return Err(err_at(self.pos, "truncated fixed-width field"));
        }
        self.pos += n;
        Ok(())
    }

    /// Reads a repeated varint field that may be packed (LEN) or not.
    pub(crate) fn varints(&mut self, wire: u8, out: &mut Vec<i64>) -> Result<()> {
        if wire == LEN {
            let mut r = Reader::new(self.bytes()?);
            while !r.at_end() {
                out.push(r.varint()? as i64);
            }
            Ok(())
        } else if wire == VARINT {
            out.push(self.varint()? as i64);
            Ok(())
        } else {
            Err(err_at(
                self.pos,
                "repeated integer field with a wrong wire type",
            ))
        }
    }
}

#[cfg(any(test, feature = "testing"))]
fn err_at(pos: usize, what: &str) -> PlanError {
    PlanError::Decode(format!("{what} at byte {pos}"))
}

/// What is wrong where a [`Scan`] (or its caller) stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The input ends inside a varint (at: its first byte).
    TruncatedVarint,
    /// A varint past 64 bits (at: its first byte).
    VarintOverflow,
    /// A field key with field number 0 or past 2^29 (at: the key).
    FieldNumber,
    /// A length past the end of the enclosing message (at: the length).
    LengthPastEnd,
    /// A fixed-width field past the end of its message (at: the field).
    TruncatedFixed,
    /// A wire type protobuf does not have, 3, 4, 6 or 7 (at: after the key).
    WireType(u8),
    /// A repeated integer of wire type neither packed nor varint (at: after
    /// the key).
    RepeatedIntWire(u8),
    /// A string that is not UTF-8 (at: its first byte).
    NotUtf8,
    /// A field of `GraphDef` (node, library) of the wrong wire type (at:
    /// after the key).
    GraphDefWire { field: u8, wire: u8 },
    /// A field of `NodeDef` (1 to 5) of the wrong wire type (at: after the key).
    NodeDefWire { field: u8, wire: u8 },
    /// More than 2^32 shape dimensions or type-list entries in all (at: the
    /// end of the node that passed the limit).
    TooLarge,
}

thread_local! {
    /// The address of the bytes the last [`Malformed`] of this thread is
    /// about: written where the error is made, read where it is reported,
    /// with nothing decoded in between (the error returns at once), so that
    /// an error stays as small as the [`Fault`] and the results of the hot
    /// reads stay in registers.
    static LAST_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The error of a [`Scan`]: a [`Fault`], and where (see [`Malformed::offset_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(Fault);

impl Malformed {
    /// `fault` at the byte `at` points to.
    #[cold]
    #[inline(never)]
    pub(crate) fn at(at: *const u8, fault: Fault) -> Malformed {
        LAST_AT.with(|c| c.set(at as usize));
        Malformed(fault)
    }

    /// `fault` at `bytes[i]` (or just past the end).
    #[cold]
    #[inline(never)]
    pub(crate) fn in_bytes(bytes: &[u8], i: usize, fault: Fault) -> Malformed {
        Malformed::at(bytes.as_ptr().wrapping_add(i), fault)
    }

    pub(crate) fn fault(self) -> Fault {
        self.0
    }

    /// The offset in `input` of the byte the fault is about, if it lies in
    /// `input` (or just past its end). Call it before anything else is
    /// decoded on this thread.
    pub(crate) fn offset_in(self, input: &[u8]) -> Option<usize> {
        let at = LAST_AT.with(std::cell::Cell::get);
        let off = at.checked_sub(input.as_ptr() as usize)?;
        (off <= input.len()).then_some(off)
    }
}

/// Result of a [`Scan`] read.
pub(crate) type Scanned<T> = std::result::Result<T, Malformed>;

/// A varint of two or more bytes at `buf[start..]` (or a malformed one):
/// its value and the position after it. A free function taking the slice
/// and the position by value, so that the cursor's address never leaves the
/// hot loops that inline [`Scan::varint`].
#[inline(never)]
fn varint_slow(buf: &[u8], start: usize) -> Scanned<(u64, usize)> {
    let mut pos = start;
    let mut v: u64 = 0;
    for shift in (0..70).step_by(7) {
        let Some(&b) = buf.get(pos) else {
            return Err(Malformed::in_bytes(buf, start, Fault::TruncatedVarint));
        };
        pos += 1;
        if shift == 63 && b > 1 {
            return Err(Malformed::in_bytes(buf, start, Fault::VarintOverflow));
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((v, pos));
        }
    }
    Err(Malformed::in_bytes(buf, start, Fault::VarintOverflow))
}

/// A key that is not one byte of a field numbered 1 to 15 (or a malformed
/// one) at `buf[start..]`: (field number, wire type, position after it).
#[inline(never)]
fn key_slow(buf: &[u8], start: usize) -> Scanned<(u32, u8, usize)> {
    let (k, end) = varint_slow(buf, start)?;
    let field = k >> 3;
    if field == 0 || field > u64::from(u32::MAX >> 3) {
        return Err(Malformed::in_bytes(buf, start, Fault::FieldNumber));
    }
    Ok((field as u32, (k & 7) as u8, end))
}

/// A payload whose length at `buf[at..]` is not one byte, or runs past the
/// end of `buf`: where it starts and ends.
#[inline(never)]
fn bytes_slow(buf: &[u8], at: usize) -> Scanned<(usize, usize)> {
    let (len, start) = varint_slow(buf, at)?;
    if len > (buf.len() - start) as u64 {
        return Err(Malformed::in_bytes(buf, at, Fault::LengthPastEnd));
    }
    Ok((start, start + len as usize))
}

/// A protobuf cursor for hot loops: every read checked, an error of one
/// word ([`Malformed`]), byte strings left for the caller to check as UTF-8.
pub(crate) struct Scan<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Scan<'a> {
    #[inline]
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Scan { buf, pos: 0 }
    }

    /// The position of the cursor in its message.
    #[inline]
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// `fault` at byte `pos` of this message. Inlined, so that the cold
    /// call gets the slice and the position, never the address of the
    /// cursor (which would keep `pos` in memory in every hot loop).
    #[inline(always)]
    fn fault(&self, pos: usize, fault: Fault) -> Malformed {
        Malformed::in_bytes(self.buf, pos, fault)
    }

    /// `fault` at the current position (just after the last key read).
    #[inline(always)]
    pub(crate) fn fault_here(&self, fault: Fault) -> Malformed {
        self.fault(self.pos, fault)
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> Scanned<u64> {
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => {
                let (v, end) = varint_slow(self.buf, self.pos)?;
                self.pos = end;
                Ok(v)
            }
        }
    }

    /// Reads a field key: (field number, wire type).
    #[inline]
    pub(crate) fn key(&mut self) -> Scanned<(u32, u8)> {
        // A one-byte key of a field numbered 1 to 15 (nearly every key):
        // one range check.
        match self.buf.get(self.pos) {
            Some(&b) if (8..0x80).contains(&b) => {
                self.pos += 1;
                Ok((u32::from(b >> 3), b & 7))
            }
            _ => {
                let (field, wire, end) = key_slow(self.buf, self.pos)?;
                self.pos = end;
                Ok((field, wire))
            }
        }
    }

    /// Reads a length-delimited payload.
    #[inline]
    pub(crate) fn bytes(&mut self) -> Scanned<&'a [u8]> {
        // A one-byte length within the message (most of them): one check.
        let rest = self.buf.get(self.pos + 1..).unwrap_or_default();
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 && usize::from(b) <= rest.len() => {
                self.pos += 1 + usize::from(b);
                Ok(&rest[..usize::from(b)])
            }
            _ => {
                let (start, end) = bytes_slow(self.buf, self.pos)?;
                self.pos = end;
                Ok(&self.buf[start..end])
            }
        }
    }

    /// Reads a length-delimited payload that must be UTF-8.
    #[inline]
    pub(crate) fn str(&mut self) -> Scanned<&'a str> {
        let b = self.bytes()?;
        std::str::from_utf8(b).map_err(|_| Malformed::in_bytes(b, 0, Fault::NotUtf8))
    }

    /// Skips a field of the given wire type.
    #[inline]
    pub(crate) fn skip(&mut self, wire: u8) -> Scanned<()> {
        let n = match wire {
            VARINT => return self.varint().map(|_| ()),
            LEN => return self.bytes().map(|_| ()),
            FIXED64 => 8,
            FIXED32 => 4,
            _ => return Err(self.fault_here(Fault::WireType(wire))),
        };
        if self.buf.len() - self.pos < n {
            return Err(self.fault(self.pos, Fault::TruncatedFixed));
        }
        self.pos += n;
        Ok(())
    }

    /// Calls `f` on every value of a repeated varint field, packed (LEN) or
    /// not; accepts what [`Reader::varints`] accepts.
    #[inline]
    pub(crate) fn for_each_varint(&mut self, wire: u8, mut f: impl FnMut(u64)) -> Scanned<()> {
        match wire {
            LEN => {
                let mut r = Scan::new(self.bytes()?);
                while !r.at_end() {
                    f(r.varint()?);
                }
                Ok(())
            }
            VARINT => {
                f(self.varint()?);
                Ok(())
            }
            _ => Err(self.fault_here(Fault::RepeatedIntWire(wire))),
        }
    }
}

/// The key at `at` in `input`, read again to describe an error: (field
/// number, wire type), or `None` past the end.
pub(crate) fn key_at(input: &[u8], at: usize) -> Option<(u64, u8)> {
    let k = varint_at(input, at)?;
    Some((k >> 3, (k & 7) as u8))
}

/// The varint at `at` in `input` (its low 64 bits), read again to describe
/// an error; `None` if it does not end in the input.
pub(crate) fn varint_at(input: &[u8], at: usize) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in input.get(at..)?.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f).checked_shl(7 * i as u32).unwrap_or(0);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A protobuf writer (used by the synthetic generator and tests: compiled
/// with the `testing` feature only).
#[cfg(feature = "testing")]
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

#[cfg(feature = "testing")]
impl Writer {
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    pub(crate) fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    pub(crate) fn bytes_field(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    pub(crate) fn varint_field(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        self.varint(v);
    }

    /// Writes a nested message produced by `f`.
    pub(crate) fn message(&mut self, field: u32, f: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        f(&mut inner);
        self.bytes_field(field, &inner.buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut w = Writer::default();
            w.varint(v);
            assert_eq!(Reader::new(&w.buf).varint().unwrap(), v);
        }
    }

    /// Walks a message's fields with `Reader` and with `Scan`: both must
    /// accept or both reject, at the same field.
    fn same_walk(b: &[u8]) {
        let (mut r, mut s) = (Reader::new(b), Scan::new(b));
        loop {
            assert_eq!(r.at_end(), s.at_end());
            if r.at_end() {
                return;
            }
            let (kr, ks) = (r.key(), s.key());
            assert_eq!(kr.is_ok(), ks.is_ok(), "{b:?}");
            let Ok((field, wire)) = kr else { return };
            assert_eq!(Ok((field, wire)), ks);
            let (rr, rs) = if field % 2 == 0 {
                let mut v = Vec::new();
                (r.varints(wire, &mut v), s.for_each_varint(wire, |_| {}))
            } else {
                (r.skip(wire), s.skip(wire))
            };
            assert_eq!(rr.is_ok(), rs.is_ok(), "{b:?}");
            if rr.is_err() {
                return;
            }
        }
    }

    #[test]
    fn scan_accepts_what_reader_accepts() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for len in 0..5000 {
            let b: Vec<u8> = (0..len % 40)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            same_walk(&b);
        }
        same_walk(&[0x0a, 0x02, 0x08, 0x01]);
        same_walk(&[0x0a, 0x05, 0x80, 0x80]);
    }

    #[test]
    fn truncated_and_oversized_inputs_are_errors() {
        assert!(Reader::new(&[0x80]).varint().is_err());
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        // declared length 1000 with 1 byte left
        let mut w = Writer::default();
        w.varint(1000);
        w.buf.push(0);
        assert!(Reader::new(&w.buf).bytes().is_err());
        assert!(Reader::new(&[0x0b]).key().is_ok()); // field 1, wire 3
        assert!(Reader::new(&[0x0b]).skip(3).is_err());
    }
}
