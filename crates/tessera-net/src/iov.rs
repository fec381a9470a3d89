//! Vectored socket I/O that moves every byte of a list of memory pieces.
//!
//! `writev`/`readv` may move fewer bytes than asked and take at most `IOV_MAX` pieces per
//! call; these loops advance through the piece list until all of it has moved, passing at most
//! [`IOV_PIECES_MAX`] pieces per system call and never copying the data.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};

use tessera_proto::limits::IOV_PIECES_MAX;

/// Writes every byte of `slices`, `IOV_PIECES_MAX` pieces per `writev` at most.
/// Returns the number of system calls made.
pub fn write_all_vectored<W: Write>(
    writer: &mut W,
    mut slices: &mut [IoSlice<'_>],
) -> io::Result<usize> {
    let mut calls = 0;
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let window = slices.len().min(IOV_PIECES_MAX);
        let written = writer.write_vectored(&slices[..window])?;
        calls += 1;
        if written == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "socket accepted no bytes",
            ));
        }
        IoSlice::advance_slices(&mut slices, written);
    }
    Ok(calls)
}

/// Fills every byte of `slices`, `IOV_PIECES_MAX` pieces per `readv` at most.
/// Returns the number of system calls made.
pub fn read_exact_vectored<R: Read>(
    reader: &mut R,
    mut slices: &mut [IoSliceMut<'_>],
) -> io::Result<usize> {
    let mut calls = 0;
    IoSliceMut::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let window = slices.len().min(IOV_PIECES_MAX);
        let read = match reader.read_vectored(&mut slices[..window]) {
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        calls += 1;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection",
            ));
        }
        IoSliceMut::advance_slices(&mut slices, read);
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most 3 bytes and 2 pieces per call, to exercise the loop.
    struct Trickle(Vec<u8>, usize);

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(3);
            self.0.extend_from_slice(&buf[..n]);
            self.1 += 1;
            Ok(n)
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.1 += 1;
            let mut budget = 3;
            let mut total = 0;
            for buf in bufs.iter().take(2) {
                let n = buf.len().min(budget);
                self.0.extend_from_slice(&buf[..n]);
                budget -= n;
                total += n;
                if budget == 0 {
                    break;
                }
            }
            Ok(total)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_move_every_byte_in_order() {
        let pieces: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; usize::from(i) + 1]).collect();
        let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let mut sink = Trickle(Vec::new(), 0);
        write_all_vectored(&mut sink, &mut slices).unwrap();
        assert_eq!(sink.0, pieces.concat());
    }

    #[test]
    fn reads_scatter_across_pieces() {
        let source: Vec<u8> = (0..=20).collect();
        let mut a = [0u8; 5];
        let mut b = [0u8; 0];
        let mut c = [0u8; 16];
        let mut slices = [
            IoSliceMut::new(&mut a),
            IoSliceMut::new(&mut b),
            IoSliceMut::new(&mut c),
        ];
        read_exact_vectored(&mut &source[..], &mut slices).unwrap();
        assert_eq!(a, [0, 1, 2, 3, 4]);
        assert_eq!(c[15], 20);
        let mut short = [0u8; 30];
        let err =
            read_exact_vectored(&mut &source[..], &mut [IoSliceMut::new(&mut short)]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
