//! A protobuf reader that borrows from the buffer it reads: each field
//! comes out as its number and its value, length-delimited values as
//! slices of the buffer. Remote write 1.0 is decoded with it
//! ([`super::decode`]): a request carries thousands of label names and
//! values, and reading them as slices, rather than as one owned (or
//! reference-counted) value each as `prost` does, is most of what
//! decoding a request costs. Unknown fields are skipped, groups
//! included, as `prost` skips them.

use thiserror::Error;

/// How deep groups may nest inside a skipped field (`prost`'s recursion
/// limit).
const MAX_DEPTH: u32 = 100;

/// Why bytes are not protobuf.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(super) enum WireError {
    #[error("the buffer ends inside a field")]
    Truncated,
    #[error("a varint longer than 10 bytes")]
    BadVarint,
    #[error("invalid field key {0}")]
    BadKey(u64),
    #[error("invalid wire type {wire_type} for field {field}")]
    BadWireType { field: u32, wire_type: u8 },
    #[error("an end-group tag without its start")]
    UnmatchedGroupEnd,
    #[error("groups nested deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// A field's value as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

impl Wire<'_> {
    /// The wire type's number, for errors.
    fn wire_type(self) -> u8 {
        match self {
            Wire::Varint(_) => 0,
            Wire::Fixed64(_) => 1,
            Wire::Bytes(_) => 2,
            Wire::Fixed32(_) => 5,
        }
    }
}

impl<'a> Wire<'a> {
    fn wrong(self, field: u32) -> WireError {
        WireError::BadWireType {
            field,
            wire_type: self.wire_type(),
        }
    }

    /// The value of length-delimited field `field` (a string, bytes, a
    /// message), or the error of another wire type.
    pub(super) fn len_delimited(self, field: u32) -> Result<&'a [u8], WireError> {
        match self {
            Wire::Bytes(b) => Ok(b),
            w => Err(w.wrong(field)),
        }
    }

    /// The value of varint field `field` (`int64`, `int32`, `uint32`…, as
    /// its bits: the caller casts).
    pub(super) fn varint(self, field: u32) -> Result<u64, WireError> {
        match self {
            Wire::Varint(v) => Ok(v),
            w => Err(w.wrong(field)),
        }
    }

    /// The value of 64-bit field `field` (`double`, `fixed64`).
    pub(super) fn fixed64(self, field: u32) -> Result<u64, WireError> {
        match self {
            Wire::Fixed64(v) => Ok(v),
            w => Err(w.wrong(field)),
        }
    }
}

/// The fields of a message, in the order written.
pub(super) struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Fields<'a> {
        Fields { buf }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for (i, &b) in self.buf.iter().enumerate().take(10) {
            // The tenth byte holds the 64th bit only.
            if i == 9 && b > 1 {
                return Err(WireError::BadVarint);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        if self.buf.len() < 10 {
            Err(WireError::Truncated)
        } else {
            Err(WireError::BadVarint)
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// A field key: its number and wire type.
    fn key(&mut self) -> Result<(u32, u8), WireError> {
        let key = self.varint()?;
        let field = key >> 3;
        if field == 0 || key > u64::from(u32::MAX) {
            return Err(WireError::BadKey(key));
        }
        Ok((field as u32, (key & 7) as u8))
    }

    /// The value of a field of `wire_type`; `None` for a group, skipped.
    fn value(
        &mut self,
        field: u32,
        wire_type: u8,
        depth: u32,
    ) -> Result<Option<Wire<'a>>, WireError> {
        Ok(Some(match wire_type {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Wire::Fixed64(u64::from_le_bytes(
                    b.try_into().map_err(|_| WireError::Truncated)?,
                ))
            }
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| WireError::Truncated)?;
                Wire::Bytes(self.take(len)?)
            }
            3 => {
                self.skip_group(field, depth + 1)?;
                return Ok(None);
            }
            4 => return Err(WireError::UnmatchedGroupEnd),
            5 => {
                let b = self.take(4)?;
                Wire::Fixed32(u32::from_le_bytes(
                    b.try_into().map_err(|_| WireError::Truncated)?,
                ))
            }
            wire_type => return Err(WireError::BadWireType { field, wire_type }),
        }))
    }

    /// Skips the fields of a group up to its end tag.
    fn skip_group(&mut self, field: u32, depth: u32) -> Result<(), WireError> {
        if depth > MAX_DEPTH {
            return Err(WireError::TooDeep);
        }
        loop {
            if self.buf.is_empty() {
                return Err(WireError::Truncated);
            }
            let (inner, wire_type) = self.key()?;
            if wire_type == 4 {
                return if inner == field {
                    Ok(())
                } else {
                    Err(WireError::UnmatchedGroupEnd)
                };
            }
            self.value(inner, wire_type, depth)?;
        }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Wire<'a>), WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.buf.is_empty() {
                return None;
            }
            let field = self
                .key()
                .and_then(|(field, wire_type)| Ok((field, self.value(field, wire_type, 0)?)));
            match field {
                Ok((field, Some(w))) => return Some(Ok((field, w))),
                Ok((_, None)) => continue,
                Err(e) => {
                    // Nothing more is read after an error.
                    self.buf = &[];
                    return Some(Err(e));
                }
            }
        }
    }
}
