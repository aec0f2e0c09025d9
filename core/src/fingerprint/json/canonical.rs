//! The canonicalizer: reads a JSON text once, front to back, and writes its RFC 8785 form
//! as it goes, without building a tree.
//!
//! Scalars are written as they are read. An array's elements stay in their order; an
//! object's members are written as they come, each as `,"name":value`, and put in order
//! when the object closes. A member or element at the end of an ignored path is written
//! too (its duplicate names must still be found) and dropped when it ends (an element) or
//! when its object closes (a member). The nesting is an explicit stack of [`Frame`]s, so
//! depth costs no call stack.
//!
//! Positions in the canonical text are counted from its start, including what a sink
//! already took: `out` holds the text from `flushed` on.

use alloc::string::String;
use alloc::vec::Vec;

use super::pointer::{self, Token};
use super::written::{compare_names, name_chars, write_char};
use super::{JsonError, MAX_JSON_DEPTH, MAX_QUOTED, number};

/// How much canonical text waits, at least, before a sink is offered what became final.
pub(super) const FLUSH_AT: usize = 1 << 16;

/// Takes canonical text as it becomes final, in order.
pub(super) type Sink<'s> = &'s mut dyn FnMut(&str);

/// An array or object being read.
struct Frame {
    /// An object (else an array).
    object: bool,
    /// Where its first child's text starts: just after its `{` or `[`.
    content: usize,
    /// Its first member in [`Canonical::members`] (objects).
    first_member: usize,
    /// Its live paths (those that continue below it) start here in [`Canonical::live`].
    first_live: usize,
    /// Children begun so far: the index of the next element (arrays).
    seen: usize,
    /// Children kept so far: whether a comma goes before the next element (arrays).
    kept: usize,
    /// Kept whole, every child with it: a path of [`Select::Only`] ends at it or above.
    whole: bool,
    /// The child being read.
    child: Child,
}

/// A child of a container: the one being read, or a member of an open object.
#[derive(Clone, Copy, Default)]
struct Child {
    /// Where its text starts: at its comma (every member has one, and every element but
    /// an array's first kept one). A member's text runs to the next member's start or to
    /// its object's end.
    start: usize,
    /// Byte offset in the input of its name's opening quote (members).
    offset: usize,
    /// An ignored path ends at it (or, with [`Select::Only`], none reaches it).
    removed: bool,
    /// With [`Select::Only`], a path goes on below it: kept if it is a container (with
    /// what the path reaches in it), removed if it is a scalar.
    through: bool,
}

/// What the paths of a canonicalization select.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Select {
    /// The members and elements they reach are removed; the rest is kept.
    Removed,
    /// Only what they reach is kept, with the containers on the way to it.
    Only,
}

/// One canonicalization of one text.
pub(super) struct Canonical<'t> {
    text: &'t str,
    /// Byte offset of the next input byte.
    pos: usize,
    paths: Vec<Vec<Token>>,
    select: Select,
    /// The canonical text from `flushed` on.
    out: String,
    /// Bytes of canonical text a sink took.
    flushed: usize,
    /// `out`'s length at which a sink is next offered text.
    next_flush: usize,
    flush_at: usize,
    /// The open arrays and objects, outermost first.
    stack: Vec<Frame>,
    /// The members of the open objects, each object's in text order, innermost last.
    members: Vec<Child>,
    /// Indices into `paths` of each open container's live paths, innermost last.
    live: Vec<usize>,
    /// The live paths of the child being begun, should it be a container.
    next_live: Vec<usize>,
    /// Whether the child being begun is kept whole, should it be a container.
    next_whole: bool,
    /// An object's members in order, before they replace its text.
    sorted: String,
}

impl<'t> Canonical<'t> {
    /// Checks the size and the paths; reads nothing yet. A sink, if any, is offered text
    /// once `flush_at` bytes wait.
    pub(super) fn new(
        text: &'t str,
        (select, paths): (Select, &[&str]),
        max_bytes: usize,
        flush_at: usize,
    ) -> Result<Canonical<'t>, JsonError> {
        if text.len() > max_bytes {
            return Err(JsonError::TooLarge {
                size: text.len(),
                limit: max_bytes,
            });
        }
        let paths = paths
            .iter()
            .map(|p| pointer::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Canonical {
            text,
            pos: 0,
            next_live: (0..paths.len()).collect(),
            next_whole: false,
            paths,
            select,
            out: String::new(),
            flushed: 0,
            next_flush: flush_at,
            flush_at,
            stack: Vec::new(),
            members: Vec::new(),
            live: Vec::new(),
            sorted: String::new(),
        })
    }

    /// The canonical text the sink did not take (all of it without a sink).
    pub(super) fn into_text(self) -> String {
        self.out
    }

    /// Reads the whole text. `sink`, if given, takes canonical text as it becomes final;
    /// the rest is [`Canonical::into_text`].
    pub(super) fn run(&mut self, mut sink: Option<Sink<'_>>) -> Result<(), JsonError> {
        let reserve = match sink {
            Some(_) => self.text.len().min(self.flush_at.saturating_mul(2)),
            None => self.text.len(),
        };
        self.out.reserve(reserve);
        'value: loop {
            self.skip_whitespace();
            let scalar = !matches!(self.peek(), Some(b'[' | b'{'));
            match self.peek() {
                Some(open @ (b'[' | b'{')) => {
                    if self.stack.len() >= MAX_JSON_DEPTH {
                        return Err(JsonError::TooDeep {
                            offset: self.pos,
                            limit: MAX_JSON_DEPTH,
                        });
                    }
                    self.pos += 1;
                    self.out.push(char::from(open));
                    let object = open == b'{';
                    let first_live = self.live.len();
                    self.live.append(&mut self.next_live);
                    self.stack.push(Frame {
                        object,
                        content: self.len(),
                        first_member: self.members.len(),
                        first_live,
                        seen: 0,
                        kept: 0,
                        whole: core::mem::take(&mut self.next_whole),
                        child: Child::default(),
                    });
                    self.skip_whitespace();
                    if self.peek() == Some(if object { b'}' } else { b']' }) {
                        self.pos += 1;
                        self.close(&mut sink)?;
                    } else {
                        self.begin_child()?;
                        continue 'value;
                    }
                }
                Some(b'"') => self.string()?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal("true")?,
                Some(b'f') => self.literal("false")?,
                Some(b'n') => self.literal("null")?,
                _ => return Err(self.syntax("a JSON value")),
            }
            if scalar
                && let Some(frame) = self.stack.last_mut()
                && frame.child.through
            {
                // Nothing below a scalar for the path to reach.
                frame.child.removed = true;
            }
            // A value ended. It is its container's child; the container goes on or ends,
            // and an ending container is in turn a child of the one around it.
            while let Some(frame) = self.stack.last() {
                let object = frame.object;
                self.end_child();
                self.flush(&mut sink);
                self.skip_whitespace();
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        self.begin_child()?;
                        continue 'value;
                    }
                    Some(b'}') if object => {
                        self.pos += 1;
                        self.close(&mut sink)?;
                    }
                    Some(b']') if !object => {
                        self.pos += 1;
                        self.close(&mut sink)?;
                    }
                    _ => {
                        let expected = if object { "',' or '}'" } else { "',' or ']'" };
                        return Err(self.syntax(expected));
                    }
                }
            }
            self.skip_whitespace();
            if self.pos != self.text.len() {
                return Err(JsonError::TrailingContent { offset: self.pos });
            }
            self.flush(&mut sink);
            return Ok(());
        }
    }

    /// Length of the canonical text so far.
    fn len(&self) -> usize {
        self.flushed + self.out.len()
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn syntax(&self, expected: &'static str) -> JsonError {
        JsonError::Syntax {
            offset: self.pos,
            expected,
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Begins the next child of the innermost container, after its `[`, `{` or `,`: an
    /// element, or a member up to its colon. Decides whether a path removes it.
    fn begin_child(&mut self) -> Result<(), JsonError> {
        // `run` begins children only inside a container.
        let Some(frame) = self.stack.last_mut() else {
            return Ok(());
        };
        let (object, index, comma) = (frame.object, frame.seen, frame.object || frame.kept > 0);
        frame.seen += 1;
        let start = self.len();
        let mut offset = 0;
        if comma {
            self.out.push(',');
        }
        if object {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("a member name string"));
            }
            offset = self.pos;
            self.string()?;
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.syntax("':'"));
            }
            self.pos += 1;
            self.out.push(':');
        }
        let removed = self.match_paths(start, object, index);
        if let Some(frame) = self.stack.last_mut() {
            frame.child = Child {
                start,
                offset,
                removed,
                through: self.select == Select::Only && !removed && !self.next_whole,
            };
        }
        Ok(())
    }

    /// Matches the child just begun (the member written from `start`, or the element at
    /// `index`) against the innermost container's live paths: whether it is removed
    /// (with [`Select::Removed`], a path ends at it; with [`Select::Only`], none reaches
    /// it), which paths continue below it (into `next_live`), and whether it is kept
    /// whole (`next_whole`).
    fn match_paths(&mut self, start: usize, object: bool, index: usize) -> bool {
        self.next_live.clear();
        self.next_whole = false;
        let Some(frame) = self.stack.last() else {
            return false;
        };
        if frame.whole {
            self.next_whole = true;
            return false;
        }
        let live = self.live.get(frame.first_live..).unwrap_or_default();
        if live.is_empty() {
            return self.select == Select::Only;
        }
        let depth = self.stack.len() - 1;
        // The name as written, between `,"` and `":`.
        let name = object.then(|| {
            let from = start - self.flushed + 2;
            self.out.get(from..self.out.len() - 2).unwrap_or_default()
        });
        let (mut ends, mut reached) = (false, false);
        for &path in live {
            let tokens = &self.paths[path];
            let Some(token) = tokens.get(depth) else {
                continue;
            };
            let hit = match name {
                Some(name) => token.matches_name(name),
                None => token.matches_index(index),
            };
            if hit && tokens.len() == depth + 1 {
                ends = true;
            } else if hit {
                reached = true;
                self.next_live.push(path);
            }
        }
        if ends {
            // Removed, or kept whole: no path needs to go on below it.
            self.next_live.clear();
        }
        match self.select {
            Select::Removed => ends,
            Select::Only => {
                self.next_whole = ends;
                !ends && !reached
            }
        }
    }

    /// Ends the innermost container's child: a member joins its object's list, a removed
    /// element's text goes.
    fn end_child(&mut self) {
        let Some(frame) = self.stack.last_mut() else {
            return;
        };
        let child = frame.child;
        if frame.object {
            self.members.push(child);
        } else if child.removed {
            self.out.truncate(child.start - self.flushed);
        } else {
            frame.kept += 1;
        }
    }

    /// Closes the innermost container at its `]` or `}`. An object's members are put in
    /// order (a repeated name is refused) and the removed ones dropped.
    fn close(&mut self, sink: &mut Option<Sink<'_>>) -> Result<(), JsonError> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        self.live.truncate(frame.first_live);
        if !frame.object {
            self.out.push(']');
            return Ok(());
        }
        let (base, end) = (self.flushed, self.len());
        let members = self.members.get(frame.first_member..).unwrap_or_default();
        let out = &self.out;
        let name = |m: &Child| out.get(m.start - base + 2..).unwrap_or_default();
        // By UTF-16 code units, equal names in text order (the offsets make the order
        // total), so the later of two equal names is the duplicate.
        let order = crate::order::sorted_positions(members.len(), &mut |a, b| {
            let (a, b) = (&members[a], &members[b]);
            compare_names(name(a), name(b)).then(a.offset.cmp(&b.offset))
        });
        let duplicate = order
            .windows(2)
            .filter_map(|pair| {
                let (a, b) = (&members[pair[0]], &members[pair[1]]);
                compare_names(name(a), name(b)).is_eq().then_some(b)
            })
            .min_by_key(|m| m.offset);
        if let Some(m) = duplicate {
            return Err(JsonError::DuplicateMember {
                name: name_chars(name(m)).collect(),
                offset: m.offset,
            });
        }
        // Each kept member's text (`,"name":value`) in order; the first loses its comma.
        let mut kept = order.iter().filter(|&&i| !members[i].removed).map(|&i| {
            let stop = members.get(i + 1).map_or(end, |next| next.start);
            out.get(members[i].start - base..stop - base)
                .unwrap_or_default()
        });
        let first = kept.next().map(|text| text.get(1..).unwrap_or_default());
        // Nothing around the object can still change: hand it to the sink as it is
        // written, instead of rewriting it in place.
        let settled = !self.stack.iter().any(|f| f.object || f.child.removed);
        if let (true, Some(sink)) = (settled, sink.as_mut()) {
            let mut taken = 0;
            for text in [out.get(..frame.content - base).unwrap_or_default()]
                .into_iter()
                .chain(first)
                .chain(kept)
                .chain(["}"])
            {
                sink(text);
                taken += text.len();
            }
            self.out.clear();
            self.flushed += taken;
        } else {
            self.sorted.clear();
            for text in first.into_iter().chain(kept) {
                self.sorted.push_str(text);
            }
            self.out.truncate(frame.content - base);
            self.out.push_str(&self.sorted);
            self.out.push('}');
        }
        self.members.truncate(frame.first_member);
        Ok(())
    }

    /// Offers the sink the canonical text that can no longer change: all of it but what
    /// follows the outermost open object's `{` or the start of an element to be removed.
    fn flush(&mut self, sink: &mut Option<Sink<'_>>) {
        let Some(sink) = sink.as_mut() else {
            return;
        };
        if self.out.len() < self.next_flush && !self.stack.is_empty() {
            return;
        }
        let pin = self.stack.iter().find_map(|f| {
            if f.object {
                Some(f.content)
            } else if f.child.removed {
                Some(f.child.start)
            } else {
                None
            }
        });
        let final_len = pin.unwrap_or(self.len()) - self.flushed;
        // The end of a value or a container's opening bracket: a char boundary.
        if let Some(done) = self.out.get(..final_len).filter(|done| !done.is_empty()) {
            sink(done);
            self.out.drain(..final_len);
            self.flushed += final_len;
        }
        self.next_flush = self.out.len().saturating_add(self.flush_at);
    }

    fn literal(&mut self, word: &'static str) -> Result<(), JsonError> {
        let end = self.pos.saturating_add(word.len());
        if self.text.as_bytes().get(self.pos..end) != Some(word.as_bytes()) {
            return Err(self.syntax(word));
        }
        self.pos = end;
        self.out.push_str(word);
        Ok(())
    }

    /// A string from its opening quote, written in canonical form.
    fn string(&mut self) -> Result<(), JsonError> {
        let text = self.text;
        self.pos += 1; // '"'
        self.out.push('"');
        loop {
            let start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // Both ends sit next to ASCII bytes or at the text's ends: char boundaries.
            let run = text.get(start..self.pos);
            self.out
                .push_str(run.ok_or_else(|| self.syntax("a character"))?);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    self.out.push('"');
                    return Ok(());
                }
                Some(b'\\') => {
                    let c = self.escape()?;
                    write_char(c, &mut self.out);
                }
                Some(_) => return Err(self.syntax("'\\u00XX' for a control character")),
                None => return Err(self.syntax("'\"' closing the string")),
            }
        }
    }

    /// An escape sequence from its backslash.
    fn escape(&mut self) -> Result<char, JsonError> {
        let start = self.pos;
        self.pos += 1; // '\\'
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                return self.unicode_escape(start);
            }
            _ => return Err(self.syntax("one of '\"\\/bfnrtu' after '\\'")),
        };
        self.pos += 1;
        Ok(c)
    }

    /// The rest of a `\u` escape (and its low surrogate partner, if any).
    fn unicode_escape(&mut self, start: usize) -> Result<char, JsonError> {
        let unit = self.hex4()?;
        let lone = JsonError::LoneSurrogate {
            offset: start,
            code_unit: unit,
        };
        let code = match unit {
            0xD800..=0xDBFF => {
                let next = self.pos.saturating_add(2);
                if self.text.as_bytes().get(self.pos..next) != Some(b"\\u") {
                    return Err(lone);
                }
                self.pos = next;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(lone);
                }
                0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(lone),
            _ => u32::from(unit),
        };
        char::from_u32(code).ok_or(lone)
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let mut unit = 0u16;
        for _ in 0..4 {
            let digit = self.peek().and_then(|b| char::from(b).to_digit(16));
            let digit = digit.ok_or_else(|| self.syntax("four hex digits after '\\u'"))?;
            unit = (unit << 4) | digit as u16; // digit < 16
            self.pos += 1;
        }
        Ok(unit)
    }

    fn digits(&mut self) -> Result<(), JsonError> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return Err(self.syntax("a digit"));
        }
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        Ok(())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, as a finite double.
    fn number(&mut self) -> Result<(), JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        if self.peek() == Some(b'0') {
            self.pos += 1;
        } else {
            self.digits()?;
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.digits()?;
        }
        let literal = self.text.get(start..self.pos).unwrap_or_default();
        match number::parse(literal) {
            n if n.is_finite() => {
                self.out.push_str(ryu_js::Buffer::new().format_finite(n));
                Ok(())
            }
            _ => {
                let mut quoted = String::from(literal.get(..MAX_QUOTED).unwrap_or(literal));
                if quoted.len() < literal.len() {
                    quoted.push_str("...");
                }
                Err(JsonError::NotFinite {
                    literal: quoted,
                    offset: start,
                })
            }
        }
    }
}
