//! The journal's bytes: its header, each commit's checksummed record of writes, and reading them back.

use super::*;

/// A run of zero bytes at least this long (in whole 8-byte words of the write) is kept as
/// a zeroing operation, not as bytes.
pub(super) const MIN_ZERO_RUN: usize = 32;

/// Appends the operations that write `data` at `offset`: its bytes, except that each run
/// of at least [`MIN_ZERO_RUN`] zero bytes, counted in whole 8-byte words from the start
/// of `data`, becomes a zeroing operation. redb's pages are mostly zeros past their
/// entries (about three quarters of a commit's bytes), so a record is a fraction of the
/// pages it writes.
///
/// Every zeroing operation (13 bytes) stands for at least 32 bytes and follows a write
/// whose 13 bytes of header it pays for, so the operations take at most 13 bytes more
/// than `data`.
pub(super) fn encode_write(record: &mut Vec<u8>, offset: u64, data: &[u8]) {
    // Whole words compared as integers: the scan is most of a journaled commit's CPU
    // outside redb, so it stays a plain loop over words the compiler can keep tight.
    let (words, _) = data.as_chunks::<8>();
    let zero = |word: &[u8; 8]| u64::from_le_bytes(*word) == 0;
    let mut literal = 0;
    let mut i = 0;
    while let Some(found) = words[i..].iter().position(zero) {
        i += found;
        let run = words[i..].iter().take_while(|word| zero(word)).count();
        if run * 8 >= MIN_ZERO_RUN {
            push_op(
                record,
                WRITE,
                offset + literal as u64,
                &data[literal..i * 8],
            );
            push_zeros(record, offset + (i * 8) as u64, run * 8);
            literal = (i + run) * 8;
        }
        i += run;
    }
    push_op(record, WRITE, offset + literal as u64, &data[literal..]);
}

/// Appends the operation that writes `len` zero bytes at `offset`.
pub(super) fn push_zeros(record: &mut Vec<u8>, offset: u64, len: usize) {
    record.push(ZERO);
    record.extend_from_slice(&offset.to_le_bytes());
    record.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

/// Appends the operation that writes `bytes` at `offset`; nothing for no bytes.
pub(super) fn push_op(record: &mut Vec<u8>, tag: u8, offset: u64, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    record.push(tag);
    record.extend_from_slice(&offset.to_le_bytes());
    record.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    record.extend_from_slice(bytes);
}

/// Fills in the header of `record` (its payload follows the header's room).
pub(super) fn seal(record: &mut [u8], salt: u64, seq: u64) {
    let payload = u32::try_from(record.len() - RECORD_HEADER).unwrap_or(u32::MAX);
    record[0..4].copy_from_slice(RECORD_MAGIC);
    record[8..16].copy_from_slice(&salt.to_le_bytes());
    record[16..24].copy_from_slice(&seq.to_le_bytes());
    record[24..28].copy_from_slice(&payload.to_le_bytes());
    record[28..32].fill(0);
    let crc = crc32fast::hash(&record[8..]);
    record[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The header of a journal with `salt`, of the store file `owner` names.
pub(super) fn header(salt: u64, owner: Owner) -> [u8; HEADER_LEN as usize] {
    let mut header = [0; HEADER_LEN as usize];
    header[0..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&salt.to_le_bytes());
    header[20..36].copy_from_slice(&owner);
    let crc = crc32fast::hash(&header[0..36]);
    header[36..40].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Grows the journal to `limit` bytes of zeros (synced by the [`reset`] that follows), so
/// that appending a record writes blocks the file already has: a sync of a record then
/// writes the record alone, not also the file's new size and blocks.
pub(super) fn preallocate(journal: &dyn StorageBackend, limit: u64) -> io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut len = journal.len()?;
    if len >= limit {
        return Ok(());
    }
    journal.set_len(limit)?;
    // Written, not only sized: a file's new length is a hole until written.
    let zeros = vec![0; CHUNK as usize];
    while len < limit {
        let n = (limit - len).min(CHUNK);
        journal.write(len, &zeros[..n as usize])?;
        len += n;
    }
    Ok(())
}

/// Empties the journal: a new header with `salt` and `owner`, synced.
pub(super) fn reset(journal: &dyn StorageBackend, salt: u64, owner: Owner) -> io::Result<()> {
    journal.write(0, &header(salt, owner))?;
    journal.sync_data()
}

pub(super) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
}

pub(super) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
}

/// The journal's bytes, when it holds a header of this format, its salt and the store
/// file it belongs to.
pub(super) fn read_journal(
    journal: &dyn StorageBackend,
) -> io::Result<Option<(Vec<u8>, u64, Owner)>> {
    let len = journal.len()?;
    if len < HEADER_LEN {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "a journal past the address space",
        )
    })?;
    let mut bytes = vec![0; len];
    journal.read(0, &mut bytes)?;
    let valid = &bytes[0..8] == MAGIC
        && u32_at(&bytes, 8) == VERSION
        && u32_at(&bytes, 36) == crc32fast::hash(&bytes[0..36]);
    if !valid {
        return Ok(None);
    }
    let salt = u64_at(&bytes, 12);
    let mut owner = [0; 16];
    owner.copy_from_slice(&bytes[20..36]);
    Ok(Some((bytes, salt, owner)))
}

/// The payloads of the journal's whole records, in order: those with `salt` and the next
/// number, up to the first that is not.
pub(super) fn records(bytes: &[u8], salt: u64) -> Vec<&[u8]> {
    let mut found = Vec::new();
    let mut at = HEADER_LEN as usize;
    let mut seq = 0u64;
    while let Some(head) = bytes.get(at..at + RECORD_HEADER) {
        let len = u32_at(head, 24) as usize;
        let Some(whole) = bytes.get(at..at + RECORD_HEADER + len) else {
            break;
        };
        let valid = &head[0..4] == RECORD_MAGIC
            && u64_at(head, 8) == salt
            && u64_at(head, 16) == seq
            && u32_at(head, 4) == crc32fast::hash(&whole[8..]);
        if !valid {
            break;
        }
        found.push(&whole[RECORD_HEADER..]);
        at += whole.len();
        seq += 1;
    }
    found
}

/// Applies one record's operations to `main`.
pub(super) fn apply(main: &dyn StorageBackend, mut payload: &[u8]) -> io::Result<()> {
    let damaged = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "a journal record whose checksum holds does not decode",
        )
    };
    while let Some((&tag, rest)) = payload.split_first() {
        match tag {
            WRITE if rest.len() >= 12 => {
                let offset = u64_at(rest, 0);
                let len = u32_at(rest, 8) as usize;
                let data = rest.get(12..12 + len).ok_or_else(damaged)?;
                main.write(offset, data)?;
                payload = &rest[12 + len..];
            }
            ZERO if rest.len() >= 12 => {
                let offset = u64_at(rest, 0);
                let len = u32_at(rest, 8) as usize;
                main.write(offset, &vec![0; len])?;
                payload = &rest[12..];
            }
            SET_LEN if rest.len() >= 8 => {
                main.set_len(u64_at(rest, 0))?;
                payload = &rest[8..];
            }
            _ => return Err(damaged()),
        }
    }
    Ok(())
}
