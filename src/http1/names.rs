//! Field names as a peer spells them, remembered per connection: a client
//! or an upstream sends the same names in the same order head after head,
//! and finding a name's `HeaderName` (lower-casing it, matching it against
//! the standard names) is most of what a field costs to read
//! (docs/benchmarks-history.md, "Names remembered"). A name spelled as the
//! last head spelled it at the same place is taken from there.

use http::header::{HeaderName, InvalidHeaderName};

/// How many of a head's first fields are remembered, and how long a name
/// may be to be: at most 1 KiB of names a connection, whatever a peer
/// sends.
const REMEMBERED: usize = 16;
const LONGEST: usize = 64;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Names {
    /// The last head's names, by position: as spelled, and found.
    seen: Vec<(Box<[u8]>, HeaderName)>,
}

impl Names {
    /// The name spelled `spelled`, the head's field number `index`.
    #[inline]
    pub fn find(&mut self, index: usize, spelled: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
        if let Some((last, name)) = self.seen.get(index) {
            if **last == *spelled {
                return Ok(name.clone());
            }
        }
        self.look_up(index, spelled)
    }

    /// [`Names::find`] for a name not remembered at `index`: found, and
    /// remembered there.
    #[cold]
    fn look_up(&mut self, index: usize, spelled: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
        let name = HeaderName::from_bytes(spelled)?;
        if spelled.len() > LONGEST {
            return Ok(name);
        }
        let remembered = (Box::from(spelled), name.clone());
        match index {
            _ if index < self.seen.len() => self.seen[index] = remembered,
            _ if index == self.seen.len() && index < REMEMBERED => self.seen.push(remembered),
            _ => {}
        }
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_what_header_name_finds_however_often_it_comes() {
        let mut names = Names::default();
        let heads: [&[&str]; 4] = [
            &["Host", "Content-Type", "X-Custom"],
            &["Host", "Content-Type", "X-Custom"],
            &["host", "Content-Length", "X-Custom", "Accept"],
            &["Host", "Content-Type"],
        ];
        for head in heads {
            for (index, spelled) in head.iter().enumerate() {
                let found = names.find(index, spelled.as_bytes()).unwrap();
                assert_eq!(found, HeaderName::from_bytes(spelled.as_bytes()).unwrap());
            }
        }
        assert!(names.find(0, b"bad name").is_err());
        // An invalid name is never remembered as a valid one.
        assert!(names.find(0, b"bad name").is_err());
    }

    #[test]
    fn only_the_first_fields_are_remembered() {
        let mut names = Names::default();
        for index in 0..REMEMBERED + 4 {
            names.find(index, b"X-Field").unwrap();
        }
        assert_eq!(names.seen.len(), REMEMBERED);
        let long = [b'x'; LONGEST + 1];
        assert!(names.find(0, &long).is_ok());
        assert_ne!(&*names.seen[0].0, &long[..], "a long name is not kept");
    }
}
