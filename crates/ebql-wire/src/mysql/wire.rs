//! The protocol's constants and the parsers of single packets' payloads:
//! length-encoded integers, OK/ERR/EOF, the server's Handshake and the
//! client's HandshakeResponse, COM_QUERY's optional query attributes.
//!
//! Every parser reads a captured prefix of a payload in place and returns
//! `None` when the bytes it needs are not there: it never panics and never
//! guesses a field it could not read.

use crate::StatementError;

// Capability flags (MySQL `include/mysql_com.h`, "Capabilities Flags").
/// `CLIENT_LONG_PASSWORD`; MariaDB servers clear it (`CLIENT_MYSQL`) to say
/// their Handshake carries MariaDB's extended capabilities.
pub const CLIENT_MYSQL: u64 = 1;
/// The HandshakeResponse names a database.
pub const CLIENT_CONNECT_WITH_DB: u64 = 1 << 3;
/// zlib-compressed packets after the handshake.
pub const CLIENT_COMPRESS: u64 = 1 << 5;
/// The 4.1 protocol (SQLSTATE in ERR, 5-byte EOF, 32-byte HandshakeResponse header).
pub const CLIENT_PROTOCOL_41: u64 = 1 << 9;
/// TLS: the SSLRequest.
pub const CLIENT_SSL: u64 = 1 << 11;
/// Auth data prefixed by a 1-byte length.
pub const CLIENT_SECURE_CONNECTION: u64 = 1 << 15;
/// Auth data prefixed by a length-encoded integer.
pub const CLIENT_PLUGIN_AUTH_LENENC: u64 = 1 << 21;
/// OK packets carry session state changes (the current schema among them).
pub const CLIENT_SESSION_TRACK: u64 = 1 << 23;
/// Result sets and prepare responses end without EOF packets.
pub const CLIENT_DEPRECATE_EOF: u64 = 1 << 24;
/// zstd-compressed packets (MySQL 8).
pub const CLIENT_ZSTD: u64 = 1 << 26;
/// COM_QUERY carries query attributes before the text (MySQL 8.0.23+).
pub const CLIENT_QUERY_ATTRIBUTES: u64 = 1 << 27;

// Status flags (OK and EOF packets).
/// More results follow (multi-statements, stored procedures).
pub const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;
/// A cursor was opened: COM_STMT_EXECUTE's rows come with COM_STMT_FETCH.
pub const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x0040;
/// The OK packet carries session state information.
pub const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;
/// Session state entry type: the current schema changed.
const SESSION_TRACK_SCHEMA: u8 = 1;

// Commands (MySQL `enum_server_command`, MariaDB's COM_STMT_BULK_EXECUTE).
pub const COM_QUIT: u8 = 0x01;
pub const COM_INIT_DB: u8 = 0x02;
pub const COM_QUERY: u8 = 0x03;
pub const COM_FIELD_LIST: u8 = 0x04;
pub const COM_STATISTICS: u8 = 0x09;
pub const COM_PROCESS_INFO: u8 = 0x0a;
pub const COM_DEBUG: u8 = 0x0d;
pub const COM_PING: u8 = 0x0e;
pub const COM_CHANGE_USER: u8 = 0x11;
pub const COM_BINLOG_DUMP: u8 = 0x12;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
pub const COM_STMT_CLOSE: u8 = 0x19;
pub const COM_STMT_RESET: u8 = 0x1a;
pub const COM_SET_OPTION: u8 = 0x1b;
pub const COM_STMT_FETCH: u8 = 0x1c;
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1e;
pub const COM_RESET_CONNECTION: u8 = 0x1f;
pub const COM_STMT_BULK_EXECUTE: u8 = 0xfa;

/// A payload length of 0xffffff: the payload continues in the next packet.
pub const MAX_PACKET: u32 = 0xff_ffff;

/// Little-endian u16 at `at`.
pub fn u16_at(p: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(p.get(at..at + 2)?.try_into().ok()?))
}

/// Little-endian u32 at `at`.
pub fn u32_at(p: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(p.get(at..at + 4)?.try_into().ok()?))
}

/// A length-encoded integer at `*at` (advancing it); `None` for 0xfb
/// (NULL), 0xff, or bytes not there.
pub fn lenenc(p: &[u8], at: &mut usize) -> Option<u64> {
    let first = *p.get(*at)?;
    let (n, v) = match first {
        0..=0xfa => (1, u64::from(first)),
        0xfc => (3, u64::from(u16_at(p, *at + 1)?)),
        0xfd => {
            let b = p.get(*at + 1..*at + 4)?;
            (
                4,
                u64::from(b[0]) | u64::from(b[1]) << 8 | u64::from(b[2]) << 16,
            )
        }
        0xfe => (
            9,
            u64::from_le_bytes(p.get(*at + 1..*at + 9)?.try_into().ok()?),
        ),
        _ => return None,
    };
    *at += n;
    Some(v)
}

/// A length-encoded string at `*at` (advancing it).
pub fn lenenc_str<'p>(p: &'p [u8], at: &mut usize) -> Option<&'p [u8]> {
    let mut i = *at;
    let n = usize::try_from(lenenc(p, &mut i)?).ok()?;
    let s = p.get(i..i.checked_add(n)?)?;
    *at = i + n;
    Some(s)
}

/// A NUL-terminated string at `*at` (advancing it past the NUL).
pub fn nul_str<'p>(p: &'p [u8], at: &mut usize) -> Option<&'p [u8]> {
    let rest = p.get(*at..)?;
    let n = rest.iter().position(|&b| b == 0)?;
    *at += n + 1;
    Some(&rest[..n])
}

/// Lossy UTF-8.
pub fn string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What an OK packet (header 0x00, or 0xfe as a result set's terminator
/// under CLIENT_DEPRECATE_EOF) says.
#[derive(Debug, Default)]
pub struct Ok<'p> {
    pub affected: u64,
    pub status: u16,
    /// The new current schema, when session tracking reported one.
    pub schema: Option<&'p [u8]>,
}

/// Parses an OK packet's captured prefix. `caps` are the negotiated
/// capabilities when the handshake was seen: session state (the schema)
/// is read only then and only when `complete` (the whole payload captured).
pub fn ok_packet(p: &[u8], caps: Option<u64>, complete: bool) -> Option<Ok<'_>> {
    let mut at = 1;
    let affected = lenenc(p, &mut at)?;
    lenenc(p, &mut at)?; // last insert id
    let status = u16_at(p, at)?;
    at += 4; // status, warnings
    let mut ok = Ok {
        affected,
        status,
        schema: None,
    };
    let Some(caps) = caps else { return Some(ok) };
    if !complete || caps & CLIENT_SESSION_TRACK == 0 || status & SERVER_SESSION_STATE_CHANGED == 0 {
        return Some(ok);
    }
    // info (lenenc string), then the session state changes (lenenc string
    // of entries: type, lenenc data).
    let _info = lenenc_str(p, &mut at);
    if let Some(changes) = lenenc_str(p, &mut at) {
        let mut i = 0;
        while i < changes.len() {
            let kind = changes[i];
            i += 1;
            let Some(data) = lenenc_str(changes, &mut i) else {
                break;
            };
            if kind == SESSION_TRACK_SCHEMA {
                let mut j = 0;
                if let Some(name) = lenenc_str(data, &mut j) {
                    ok.schema = Some(name);
                }
            }
        }
    }
    Some(ok)
}

/// The status flags of a 0xfe packet ending metadata or rows: an EOF packet
/// (5 bytes: header, warnings, status) or an OK packet with a 0xfe header;
/// `None` when they were not captured.
pub fn terminator_status(p: &[u8], len: u64) -> Option<u16> {
    if len < 7 {
        u16_at(p, 3)
    } else {
        ok_packet(p, None, false).map(|ok| ok.status)
    }
}

/// An ERR packet: error code, `#` and SQLSTATE (4.1 protocol), message.
/// MariaDB's progress reports are ERR packets with code 0xffff: `None`.
pub fn err_packet(p: &[u8]) -> Option<StatementError> {
    let code = u16_at(p, 1).unwrap_or(0);
    if code == 0xffff {
        return None;
    }
    let rest = p.get(3..).unwrap_or_default();
    let (sqlstate, message) = match rest {
        [b'#', s @ ..] if s.len() >= 5 => (string(&s[..5]), &s[5..]),
        _ => (String::new(), rest),
    };
    Some(StatementError {
        sqlstate,
        code: Some(u32::from(code)),
        message: string(message),
    })
}

/// The server's capabilities from its Handshake (protocol 10) payload,
/// MariaDB's extended capabilities in bits 32..63.
pub fn greeting_caps(p: &[u8]) -> Option<u64> {
    if *p.first()? != 10 {
        return None;
    }
    let mut at = 1;
    nul_str(p, &mut at)?; // server version
    at += 4 + 8 + 1; // thread id, auth-plugin-data-part-1, filler
    let mut caps = u64::from(u16_at(p, at)?);
    at += 2;
    if let Some(high) = u16_at(p, at + 3) {
        caps |= u64::from(high) << 16; // after charset and status
    }
    // auth-plugin-data length (1), reserved (6), MariaDB capabilities (4).
    if caps & CLIENT_MYSQL == 0 {
        if let Some(ext) = u32_at(p, at + 3 + 2 + 1 + 6) {
            caps |= u64::from(ext) << 32;
        }
    }
    Some(caps)
}

/// What a client's HandshakeResponse says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Login {
    /// Its capabilities (MariaDB's extended ones in bits 32..63).
    pub caps: u64,
    /// An SSLRequest: TLS follows.
    pub ssl: bool,
    pub user: Option<String>,
    pub database: Option<String>,
}

/// Parses a HandshakeResponse41 (or 320) payload prefix; `len` is the whole
/// payload's length (an SSLRequest is exactly the 32-byte header).
pub fn handshake_response(p: &[u8], len: u64) -> Option<Login> {
    let caps16 = u64::from(u16_at(p, 0)?);
    if caps16 & CLIENT_PROTOCOL_41 == 0 {
        // HandshakeResponse320: caps (2), max packet (3), user, auth, [db].
        let mut at = 5;
        let user = nul_str(p, &mut at).map(string);
        let database = if caps16 & CLIENT_CONNECT_WITH_DB != 0 {
            nul_str(p, &mut at)
                .and_then(|_| nul_str(p, &mut at))
                .map(string)
        } else {
            None
        };
        return Some(Login {
            caps: caps16,
            ssl: false,
            user,
            database,
        });
    }
    let mut caps = u64::from(u32_at(p, 0)?);
    if caps & CLIENT_MYSQL == 0 {
        if let Some(ext) = u32_at(p, 28) {
            caps |= u64::from(ext) << 32;
        }
    }
    if len == 32 && caps & CLIENT_SSL != 0 {
        return Some(Login {
            caps,
            ssl: true,
            ..Login::default()
        });
    }
    let mut at = 32;
    let user = nul_str(p, &mut at).map(string);
    let mut database = None;
    if user.is_some() && caps & CLIENT_CONNECT_WITH_DB != 0 {
        let auth_ok = if caps & CLIENT_PLUGIN_AUTH_LENENC != 0 {
            lenenc_str(p, &mut at).is_some()
        } else if caps & CLIENT_SECURE_CONNECTION != 0 {
            let n = p.get(at).map(|&n| usize::from(n));
            n.is_some_and(|n| {
                at += 1 + n;
                at <= p.len()
            })
        } else {
            nul_str(p, &mut at).is_some()
        };
        if auth_ok {
            database = nul_str(p, &mut at)
                .or_else(|| (at as u64 <= len && p.len() as u64 == len).then(|| &p[at..]))
                .filter(|d| !d.is_empty())
                .map(string);
        }
    }
    Some(Login {
        caps,
        ssl: false,
        user,
        database,
    })
}

/// Bytes of one binary-protocol value of MySQL type `ty` at `at` (the
/// values of query attributes and of COM_STMT_EXECUTE parameters).
fn binary_value_len(p: &[u8], at: usize, ty: u8) -> Option<usize> {
    Some(match ty {
        0x06 => 0,                                                               // NULL
        0x01 => 1,                                                               // TINY
        0x02 | 0x0d => 2,                                                        // SHORT, YEAR
        0x03 | 0x04 | 0x09 => 4, // LONG, FLOAT, INT24
        0x05 | 0x08 => 8,        // DOUBLE, LONGLONG
        0x07 | 0x0a..=0x0c | 0x0e | 0x11..=0x13 => 1 + usize::from(*p.get(at)?), // temporal
        0x00 | 0x0f | 0x10 | 0xf5..=0xff => {
            let mut i = at;
            lenenc_str(p, &mut i)?;
            i - at
        }
        _ => return None,
    })
}

/// Where a COM_QUERY's text begins in its payload `p` (after the command
/// byte and, when `attrs`, the query attributes: parameter count,
/// parameter set count, null bitmap, types and names, values); `None`
/// when the attributes are not all captured or are not valid.
pub fn query_text_start(p: &[u8], attrs: bool) -> Option<usize> {
    if !attrs {
        return Some(1);
    }
    let mut at = 1;
    let count = usize::try_from(lenenc(p, &mut at)?).ok()?;
    if lenenc(p, &mut at)? != 1 {
        return None; // parameter_set_count: always 1
    }
    if count == 0 {
        return Some(at);
    }
    if count > 4096 {
        return None;
    }
    let bitmap = p.get(at..at + count.div_ceil(8))?;
    at += bitmap.len();
    if *p.get(at)? != 1 {
        return None; // new_params_bind_flag: always 1
    }
    at += 1;
    let types_at = at;
    for _ in 0..count {
        at += 2;
        lenenc_str(p, &mut at)?; // name
    }
    let mut t = types_at;
    for i in 0..count {
        let ty = *p.get(t)?;
        t += 2;
        lenenc_str(p, &mut t)?;
        if bitmap[i / 8] & (1 << (i % 8)) == 0 {
            at += binary_value_len(p, at, ty)?;
        }
    }
    (at <= p.len()).then_some(at)
}

/// A client command with a length that command can have: a known command
/// byte (not the server-internal ones), fixed lengths where the command
/// has one (1 for COM_PING, 5 for COM_STMT_CLOSE, …), an iteration count
/// of 1 in COM_STMT_EXECUTE. With `resync` (the decoder is looking for a
/// command to join a conversation at), only common commands, and a text
/// of at least one byte.
pub fn command_fits(p: &[u8], len: u64, resync: bool) -> bool {
    let Some(&cmd) = p.first() else { return false };
    let text = if resync { 2 } else { 1 };
    match cmd {
        COM_QUIT | COM_PING | COM_STATISTICS | COM_DEBUG | COM_RESET_CONNECTION => len == 1,
        COM_INIT_DB => (2..=1024).contains(&len),
        COM_QUERY | COM_STMT_PREPARE => len >= text,
        COM_FIELD_LIST => len >= 2,
        COM_STMT_CLOSE | COM_STMT_RESET => len == 5,
        COM_SET_OPTION => len == 3,
        COM_STMT_FETCH => len == 9,
        COM_STMT_SEND_LONG_DATA | COM_STMT_BULK_EXECUTE => len >= 7,
        // statement id, flags (cursor type), iteration count (always 1).
        COM_STMT_EXECUTE => {
            len >= 10 && p.get(5).is_some_and(|&f| f < 0x10) && u32_at(p, 6) == Some(1)
        }
        // Rarer commands, not for joining: create/drop database, refresh,
        // shutdown, process info/kill, change user, replication.
        0x05..=0x08
        | COM_PROCESS_INFO
        | 0x0c
        | COM_CHANGE_USER
        | COM_BINLOG_DUMP
        | 0x15
        | COM_BINLOG_DUMP_GTID => !resync,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenenc_forms() {
        let mut at = 0;
        assert_eq!(lenenc(&[0xfa], &mut at), Some(250));
        at = 0;
        assert_eq!(lenenc(&[0xfc, 0x34, 0x12], &mut at), Some(0x1234));
        assert_eq!(at, 3);
        at = 0;
        assert_eq!(lenenc(&[0xfd, 1, 2, 3], &mut at), Some(0x030201));
        at = 0;
        assert_eq!(
            lenenc(&[0xfe, 1, 0, 0, 0, 0, 0, 0, 1], &mut at),
            Some(1 | 1 << 56)
        );
        at = 0;
        assert_eq!(lenenc(&[0xfe, 1], &mut at), None);
        assert_eq!(lenenc(&[0xfb], &mut at), None);
        assert_eq!(lenenc(&[], &mut at), None);
    }

    #[test]
    fn err_with_and_without_sqlstate() {
        let e = err_packet(b"\xff\x7a\x04#42S02Table 't.nope' doesn't exist").unwrap();
        assert_eq!(e.code, Some(1146));
        assert_eq!(e.sqlstate, "42S02");
        assert_eq!(e.message, "Table 't.nope' doesn't exist");
        let e = err_packet(b"\xff\x15\x04Access denied").unwrap();
        assert_eq!(
            (e.sqlstate.as_str(), e.message.as_str()),
            ("", "Access denied")
        );
        assert!(err_packet(b"\xff\xff\xff\x01\x02").is_none());
        assert!(err_packet(b"\xff").is_some());
    }

    #[test]
    fn ok_with_session_schema() {
        // As MariaDB 10.11 answered a login with database `t` (strace).
        let p = b"\x00\x00\x00\x02\x40\x00\x00\x00\x04\x01\x02\x01t";
        let ok = ok_packet(p, Some(CLIENT_SESSION_TRACK), true).unwrap();
        assert_eq!(ok.schema, Some(&b"t"[..]));
        assert_eq!(ok.status, 0x4002);
        assert!(ok_packet(p, None, true).unwrap().schema.is_none());
    }

    #[test]
    fn query_attributes() {
        assert_eq!(query_text_start(b"\x03select 1", false), Some(1));
        assert_eq!(query_text_start(b"\x03\x00\x01select 1", true), Some(3));
        // One attribute `a` = LONGLONG 7, one NULL attribute `b`.
        let mut p = vec![0x03, 2, 1, 0b10, 1, 0x08, 0, 1, b'a', 0x06, 0, 1, b'b'];
        p.extend_from_slice(&7u64.to_le_bytes());
        let start = p.len();
        p.extend_from_slice(b"select 1");
        assert_eq!(query_text_start(&p, true), Some(start));
        assert_eq!(query_text_start(&p[..start - 1], true), None);
    }
}
