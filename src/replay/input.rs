//! The logs a replay or a suggestion reads, one line at a time: files in
//! the order given, a `.gz` file through gzip (several members, as
//! logrotate's `delaycompress` and `cat a.gz b.gz` make), `-` for stdin.
//!
//! Memory stays bounded whatever a log holds: lines are read into one
//! buffer of fixed size and given out where they are, and a line longer
//! than [`LONGEST_LINE`] is never held whole: once past that length the
//! reader drops what it has and discards up to the next newline, and says
//! the line was too long (docs/replay.md, "Lines that are not access log
//! lines").

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// The longest line read (without its newline); sluice's own lines are a
/// few hundred bytes.
pub const LONGEST_LINE: usize = 1 << 20;

/// The buffer: a whole line of [`LONGEST_LINE`] and room to read more.
const BUFFER: usize = LONGEST_LINE + (256 << 10);

/// Lines of several logs, in turn.
pub struct Logs {
    paths: Vec<PathBuf>,
    /// The log being read (index into `paths`) and its reader.
    current: Option<(usize, Box<dyn Read>)>,
    next: usize,
    /// Read but not yet given out: `buffer[start..end]`. Lines are given
    /// out where they are, not copied.
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
    /// Past [`LONGEST_LINE`] of the current line: reading on to its end.
    discarding: bool,
    /// The number of the line last read in the current log.
    line_number: u64,
}

/// A line as read.
pub struct LogLine<'a> {
    /// Its log's index among those given.
    pub log: usize,
    /// Its number in that log, from 1.
    pub number: u64,
    /// Its bytes, without the newline (nor a CRLF's `\r`).
    pub text: Result<&'a [u8], TooLong>,
}

/// A line longer than [`LONGEST_LINE`], skipped unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

impl TooLong {
    /// Why the line is skipped, as `--strict` reports it.
    pub fn sentence(self) -> String {
        format!(
            "not an access log line: it is longer than {} MiB (sluice's lines are a few \
             hundred bytes)",
            LONGEST_LINE >> 20
        )
    }
}

/// A log that cannot be read: its name and why.
#[derive(Debug)]
pub struct Unreadable(pub String);

/// Where the next line is, in the buffer.
enum Found {
    Line(std::ops::Range<usize>),
    TooLong,
    /// The log is read to its end.
    End,
}

impl Logs {
    pub fn new(paths: Vec<PathBuf>) -> Logs {
        Logs {
            paths,
            current: None,
            next: 0,
            buffer: vec![0; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            discarding: false,
            line_number: 0,
        }
    }

    /// The names of the logs, as given (`stdin` for `-`).
    pub fn names(&self) -> Vec<String> {
        (0..self.paths.len())
            .map(|index| self.name(index))
            .collect()
    }

    /// The name of log `index`, as given.
    pub fn name(&self, index: usize) -> String {
        match self.paths.get(index) {
            Some(path) if path.as_os_str() == "-" => "stdin".to_owned(),
            Some(path) => path.display().to_string(),
            None => String::new(),
        }
    }

    /// The next line of the logs; `None` after the last. Bytes, as read:
    /// the line's reader checks that it is UTF-8.
    pub fn next_line(&mut self) -> Result<Option<LogLine<'_>>, Unreadable> {
        loop {
            let Some((index, _)) = &self.current else {
                let Some(path) = self.paths.get(self.next) else {
                    return Ok(None);
                };
                let reader = open(path)
                    .map_err(|error| Unreadable(format!("{}: {error}", self.name(self.next))))?;
                self.current = Some((self.next, reader));
                self.next += 1;
                self.line_number = 0;
                continue;
            };
            let log = *index;
            let text = match self.find()? {
                Found::Line(line) => Ok(trimmed(&self.buffer[line])),
                Found::TooLong => Err(TooLong),
                Found::End => {
                    self.current = None;
                    continue;
                }
            };
            self.line_number += 1;
            let number = self.line_number;
            return Ok(Some(LogLine { log, number, text }));
        }
    }

    /// The next line of the current log, reading as much as it takes.
    fn find(&mut self) -> Result<Found, Unreadable> {
        loop {
            let pending = &self.buffer[self.start..self.end];
            if let Some(newline) = memchr::memchr(b'\n', pending) {
                let line = self.start..self.start + newline;
                self.start += newline + 1;
                if std::mem::take(&mut self.discarding) || newline > LONGEST_LINE {
                    return Ok(Found::TooLong);
                }
                return Ok(Found::Line(line));
            }
            if self.discarding {
                (self.start, self.end) = (0, 0);
            } else if self.end - self.start > LONGEST_LINE {
                // Never held whole: drop it, and read on to its end.
                (self.start, self.end) = (0, 0);
                self.discarding = true;
            } else {
                // No whole line left: keep the rest at the front.
                self.buffer.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.read()? == 0 {
                // The last line, without its newline.
                let (start, end) = (self.start, self.end);
                (self.start, self.end) = (0, 0);
                if std::mem::take(&mut self.discarding) {
                    return Ok(Found::TooLong);
                }
                return Ok(if end > start {
                    Found::Line(start..end)
                } else {
                    Found::End
                });
            }
        }
    }

    /// Reads more of the current log after `end`; 0 at its end.
    fn read(&mut self) -> Result<usize, Unreadable> {
        let Some((index, reader)) = &mut self.current else {
            return Ok(0);
        };
        let index = *index;
        let read = loop {
            match reader.read(&mut self.buffer[self.end..]) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(Unreadable(format!("{}: {error}", self.name(index))));
                }
                Ok(read) => break read,
            }
        };
        self.end += read;
        Ok(read)
    }
}

/// A line without the `\r` of a CRLF ending.
fn trimmed(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn open(path: &Path) -> io::Result<Box<dyn Read>> {
    let raw: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path)?)
    };
    let mut buffered = BufReader::with_capacity(256 * 1024, raw);
    // gzip by its magic bytes, whatever the name.
    let gzip = buffered.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    if gzip {
        return Ok(Box::new(flate2::bufread::MultiGzDecoder::new(buffered)));
    }
    Ok(Box::new(buffered))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// Every line of `bytes` written to a file, as `Logs` gives them.
    fn lines_of(bytes: &[u8]) -> Vec<Result<Vec<u8>, TooLong>> {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(bytes).unwrap();
        let mut logs = Logs::new(vec![file.path().to_owned()]);
        let mut lines = Vec::new();
        while let Some(line) = logs.next_line().unwrap() {
            assert_eq!(line.number, lines.len() as u64 + 1);
            lines.push(line.text.map(<[u8]>::to_vec));
        }
        lines
    }

    #[test]
    fn a_line_past_the_longest_is_one_skipped_line_wherever_it_ends() {
        let long = vec![b'x'; LONGEST_LINE + 1];
        let longest = vec![b'y'; LONGEST_LINE];
        for huge in [LONGEST_LINE + 1, LONGEST_LINE + 4096, 3 * BUFFER + 17] {
            let mut bytes = b"a\r\n".to_vec();
            bytes.extend(std::iter::repeat_n(b'z', huge));
            bytes.extend_from_slice(b"\nb\n");
            bytes.extend_from_slice(&longest);
            bytes.extend_from_slice(b"\n");
            bytes.extend_from_slice(&long);
            assert_eq!(
                lines_of(&bytes),
                [
                    Ok(b"a".to_vec()),
                    Err(TooLong),
                    Ok(b"b".to_vec()),
                    Ok(longest.clone()),
                    Err(TooLong),
                ]
            );
        }
        assert_eq!(
            lines_of(b"a\n\nb"),
            [Ok(b"a".to_vec()), Ok(vec![]), Ok(b"b".to_vec())]
        );
        assert!(lines_of(b"").is_empty());
    }
}
