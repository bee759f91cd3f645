//! The logs a replay or a suggestion reads, one line at a time: files in
//! the order given, a `.gz` file through gzip (several members, as
//! logrotate's `delaycompress` and `cat a.gz b.gz` make), `-` for stdin.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

/// How much of a log is read at once; a longer line grows the buffer.
const CHUNK: usize = 1 << 20;
use std::path::{Path, PathBuf};

/// Lines of several logs, in turn.
pub struct Logs {
    paths: Vec<PathBuf>,
    /// The log being read (index into `paths`) and its reader.
    current: Option<(usize, Box<dyn Read>)>,
    next: usize,
    /// Read but not yet given out: `buffer[start..end]`. Lines are given
    /// out where they are, not copied.
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    /// The number of the line last read in the current log.
    line_number: u64,
}

/// A line as read: its log's index, its number there, its bytes.
pub type LogLine<'a> = (usize, u64, &'a [u8]);

/// A log that cannot be read: its name and why.
#[derive(Debug)]
pub struct Unreadable(pub String);

impl Logs {
    pub fn new(paths: Vec<PathBuf>) -> Logs {
        Logs {
            paths,
            current: None,
            next: 0,
            buffer: vec![0; CHUNK],
            start: 0,
            end: 0,
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

    /// The next line (without its newline), the index of its log and its
    /// number there; `None` after the last. Bytes, as read: the JSON
    /// parser checks that a line is UTF-8 as it reads it.
    pub fn next_line(&mut self) -> Result<Option<LogLine<'_>>, Unreadable> {
        loop {
            let Some((index, reader)) = &mut self.current else {
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
            let index = *index;
            if let Some(newline) = memchr::memchr(b'\n', &self.buffer[self.start..self.end]) {
                let line = self.start..self.start + newline;
                self.start += newline + 1;
                self.line_number += 1;
                return Ok(Some((index, self.line_number, trimmed(&self.buffer[line]))));
            }
            // No whole line left: keep the rest at the front, read more.
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buffer.len() {
                self.buffer.resize(self.buffer.len() * 2, 0);
            }
            let read = reader
                .read(&mut self.buffer[self.end..])
                .map_err(|error| Unreadable(format!("{}: {error}", self.name(index))))?;
            self.end += read;
            if read == 0 {
                self.current = None;
                if self.end > 0 {
                    // The last line, without its newline.
                    let line = 0..self.end;
                    (self.start, self.end) = (0, 0);
                    self.line_number += 1;
                    return Ok(Some((index, self.line_number, trimmed(&self.buffer[line]))));
                }
            }
        }
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
