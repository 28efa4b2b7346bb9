//! [`Meta`]: what a path's pre-image holds besides its type, bytes and
//! permission bits: its owner (uid, gid) and its extended attributes
//! (`user.*`, `trusted.*` and `security.*` as far as the capturing process
//! may read them, and POSIX ACLs as the kernel stores them:
//! `system.posix_acl_access` and `system.posix_acl_default`, raw values).
//!
//! The attribute set of most files is empty and then costs nothing in the
//! index (a NULL column). A non-empty set is stored as one byte string
//! ([`Meta::encode_xattrs`], `docs/format.md`): for each attribute, sorted
//! by name, the name, a NUL, the value's length (u32, little-endian) and
//! the value.

/// One extended attribute: its full name (`user.x`, no NUL) and value.
pub type Xattr = (Vec<u8>, Vec<u8>);

/// The owner and extended attributes of a path when it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    /// The owning user id.
    pub uid: u32,
    /// The owning group id.
    pub gid: u32,
    /// Every extended attribute, sorted by name, names unique.
    pub xattrs: Vec<Xattr>,
}

impl Meta {
    /// `xattrs` sorted by name (the order [`Meta`] keeps them in).
    pub fn new(uid: u32, gid: u32, mut xattrs: Vec<Xattr>) -> Meta {
        xattrs.sort();
        xattrs.dedup_by(|a, b| a.0 == b.0);
        Meta { uid, gid, xattrs }
    }

    /// The attribute set as one byte string; `None` when it is empty (the
    /// index then stores NULL).
    pub fn encode_xattrs(&self) -> Option<Vec<u8>> {
        if self.xattrs.is_empty() {
            return None;
        }
        let mut out = Vec::new();
        for (name, value) in &self.xattrs {
            out.extend_from_slice(name);
            out.push(0);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        Some(out)
    }

    /// Reads what [`Meta::encode_xattrs`] wrote (`None` or empty: no
    /// attributes). `Err` says what is malformed: a name without its NUL,
    /// an empty name, a value cut short, names out of order.
    pub fn decode_xattrs(bytes: Option<&[u8]>) -> Result<Vec<Xattr>, String> {
        let mut rest = bytes.unwrap_or_default();
        let mut out: Vec<Xattr> = Vec::new();
        while !rest.is_empty() {
            let nul = rest
                .iter()
                .position(|&b| b == 0)
                .ok_or("an extended attribute name without its NUL")?;
            let name = &rest[..nul];
            if name.is_empty() {
                return Err("an empty extended attribute name".into());
            }
            let len_bytes = rest
                .get(nul + 1..nul + 5)
                .ok_or("an extended attribute without its length")?;
            let len = u32::from_le_bytes(len_bytes.try_into().map_err(|_| "short length")?);
            let start = nul + 5;
            let value = rest
                .get(start..start + len as usize)
                .ok_or("an extended attribute value cut short")?;
            if out.last().is_some_and(|(prev, _)| prev.as_slice() >= name) {
                return Err("extended attribute names out of order".into());
            }
            out.push((name.to_vec(), value.to_vec()));
            rest = &rest[start + len as usize..];
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xattrs_round_trip_and_empty_costs_nothing() {
        assert_eq!(Meta::new(1, 2, vec![]).encode_xattrs(), None);
        let m = Meta::new(
            0,
            0,
            vec![
                (b"user.z".to_vec(), vec![]),
                (b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0, 0xff]),
                (b"user.a".to_vec(), b"v\0w".to_vec()),
            ],
        );
        let enc = m.encode_xattrs().expect("not empty");
        assert_eq!(Meta::decode_xattrs(Some(&enc)), Ok(m.xattrs.clone()));
        assert_eq!(m.xattrs[0].0, b"system.posix_acl_access");
        assert!(Meta::decode_xattrs(Some(&enc[..enc.len() - 1])).is_err());
        assert!(Meta::decode_xattrs(Some(b"user.a")).is_err());
        assert_eq!(Meta::decode_xattrs(None), Ok(vec![]));
    }
}
