//! ClickHouse's RowBinary format, the part rtsdb uses: `String` (LEB128
//! length, bytes), `UInt64` and `UInt32` (little-endian), `UInt8`.

use crate::storage::{Result, StorageError};

pub(crate) fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    let mut n = s.len() as u64;
    loop {
        let b = (n & 0x7F) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(s);
}

/// Reads RowBinary values in order from an answer.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn short() -> StorageError {
    StorageError::Engine("ClickHouse's RowBinary answer ended inside a value".into())
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or_else(short)?;
        let b = self.buf.get(self.pos..end).ok_or_else(short)?;
        self.pos = end;
        Ok(b)
    }

    pub(crate) fn string(&mut self) -> Result<Vec<u8>> {
        let mut n: u64 = 0;
        let mut shift = 0;
        loop {
            let b = self.take(1)?[0];
            if shift > 63 {
                return Err(short());
            }
            n |= u64::from(b & 0x7F) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        Ok(self
            .take(usize::try_from(n).map_err(|_| short())?)?
            .to_vec())
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| short())?))
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip() {
        let mut out = Vec::new();
        let long = vec![7u8; 300];
        put_string(&mut out, b"ab");
        put_string(&mut out, &long);
        out.extend_from_slice(&5u64.to_le_bytes());
        let mut r = Reader::new(&out);
        assert_eq!(r.string().unwrap(), b"ab");
        assert_eq!(r.string().unwrap(), long);
        assert_eq!(r.u64().unwrap(), 5);
        assert!(r.done());
        assert!(Reader::new(&[0x05, 1]).string().is_err());
    }
}
