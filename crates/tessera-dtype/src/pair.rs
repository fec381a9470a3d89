//! Pairing a memory stream with a file stream into a transfer list.
//!
//! Both streams hold the same bytes in the same order; a transfer is the longest stretch that
//! is contiguous on both sides. The pairing is lazy and holds one run of each side.

use crate::iter::Run;

/// A stretch contiguous in memory and in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Offset on the memory side.
    pub memory: i64,
    /// Offset on the file side.
    pub file: i64,
    /// Bytes.
    pub length: u64,
}

/// Pairs two run streams; stops when either ends.
pub fn pair<M, F>(memory: M, file: F) -> Pairs<M::IntoIter, F::IntoIter>
where
    M: IntoIterator<Item = Run>,
    F: IntoIterator<Item = Run>,
{
    Pairs {
        memory: memory.into_iter(),
        file: file.into_iter(),
        memory_run: None,
        file_run: None,
    }
}

/// The iterator of [`pair`].
#[derive(Debug, Clone)]
pub struct Pairs<M, F> {
    memory: M,
    file: F,
    memory_run: Option<Run>,
    file_run: Option<Run>,
}

impl<M: Iterator<Item = Run>, F: Iterator<Item = Run>> Iterator for Pairs<M, F> {
    type Item = Transfer;

    fn next(&mut self) -> Option<Transfer> {
        let memory = match self.memory_run.take() {
            Some(run) => run,
            None => self.memory.next()?,
        };
        let file = match self.file_run.take() {
            Some(run) => run,
            None => self.file.next()?,
        };
        let length = memory.length.min(file.length);
        #[allow(clippy::cast_possible_wrap)] // run lengths are bounded by datatype_bytes_max
        let step = length as i64;
        if memory.length > length {
            self.memory_run = Some(Run {
                offset: memory.offset + step,
                length: memory.length - length,
            });
        }
        if file.length > length {
            self.file_run = Some(Run {
                offset: file.offset + step,
                length: file.length - length,
            });
        }
        Some(Transfer {
            memory: memory.offset,
            file: file.offset,
            length,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_both_sides_boundaries() {
        let memory = [
            Run {
                offset: 0,
                length: 5,
            },
            Run {
                offset: 10,
                length: 3,
            },
        ];
        let file = [
            Run {
                offset: 100,
                length: 2,
            },
            Run {
                offset: 200,
                length: 6,
            },
        ];
        let transfers: Vec<_> = pair(memory, file).collect();
        assert_eq!(
            transfers,
            vec![
                Transfer {
                    memory: 0,
                    file: 100,
                    length: 2
                },
                Transfer {
                    memory: 2,
                    file: 200,
                    length: 3
                },
                Transfer {
                    memory: 10,
                    file: 203,
                    length: 3
                },
            ]
        );
    }
}
