//! A test-only encoder of frontend and backend messages (55.7).

use crate::postgres::frontend::{CANCEL_REQUEST, GSSENC_REQUEST, SSL_REQUEST};

/// A typed message: type byte, length, body.
pub fn msg(typ: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![typ];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn cstr(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(s);
    b.push(0);
}

fn untyped(body: &[u8]) -> Vec<u8> {
    let mut m = (body.len() as u32 + 4).to_be_bytes().to_vec();
    m.extend_from_slice(body);
    m
}

// ---- frontend ----

/// StartupMessage, protocol 3.0.
pub fn startup(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in pairs {
        cstr(&mut b, k.as_bytes());
        cstr(&mut b, v.as_bytes());
    }
    b.push(0);
    untyped(&b)
}

pub fn ssl_request() -> Vec<u8> {
    untyped(&SSL_REQUEST.to_be_bytes())
}

pub fn gss_request() -> Vec<u8> {
    untyped(&GSSENC_REQUEST.to_be_bytes())
}

pub fn cancel_request(pid: u32, key: u32) -> Vec<u8> {
    let mut b = CANCEL_REQUEST.to_be_bytes().to_vec();
    b.extend_from_slice(&pid.to_be_bytes());
    b.extend_from_slice(&key.to_be_bytes());
    untyped(&b)
}

pub fn password(p: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, p.as_bytes());
    msg(b'p', &b)
}

pub fn query(text: &str) -> Vec<u8> {
    query_bytes(text.as_bytes())
}

pub fn query_bytes(text: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, text);
    msg(b'Q', &b)
}

pub fn parse(name: &str, text: &str, oids: &[u32]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name.as_bytes());
    cstr(&mut b, text.as_bytes());
    b.extend_from_slice(&(oids.len() as i16).to_be_bytes());
    for o in oids {
        b.extend_from_slice(&o.to_be_bytes());
    }
    msg(b'P', &b)
}

/// Bind: parameter format codes, values (`None`: NULL), result format codes.
pub fn bind(
    portal: &str,
    stmt: &str,
    formats: &[i16],
    params: &[Option<&[u8]>],
    results: &[i16],
) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal.as_bytes());
    cstr(&mut b, stmt.as_bytes());
    b.extend_from_slice(&(formats.len() as i16).to_be_bytes());
    for f in formats {
        b.extend_from_slice(&f.to_be_bytes());
    }
    b.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for p in params {
        match p {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
        }
    }
    b.extend_from_slice(&(results.len() as i16).to_be_bytes());
    for f in results {
        b.extend_from_slice(&f.to_be_bytes());
    }
    msg(b'B', &b)
}

/// Bind without parameters, text results.
pub fn bind0(portal: &str, stmt: &str) -> Vec<u8> {
    bind(portal, stmt, &[], &[], &[])
}

pub fn describe(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    cstr(&mut b, name.as_bytes());
    msg(b'D', &b)
}

pub fn execute(portal: &str, max_rows: i32) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal.as_bytes());
    b.extend_from_slice(&max_rows.to_be_bytes());
    msg(b'E', &b)
}

pub fn close(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    cstr(&mut b, name.as_bytes());
    msg(b'C', &b)
}

pub fn sync() -> Vec<u8> {
    msg(b'S', &[])
}

pub fn flush() -> Vec<u8> {
    msg(b'H', &[])
}

pub fn terminate() -> Vec<u8> {
    msg(b'X', &[])
}

pub fn copy_data(data: &[u8]) -> Vec<u8> {
    msg(b'd', data)
}

pub fn copy_done() -> Vec<u8> {
    msg(b'c', &[])
}

pub fn copy_fail(why: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, why.as_bytes());
    msg(b'f', &b)
}

/// FunctionCall of `oid` with text arguments, text result.
pub fn function_call(oid: u32, args: &[&[u8]]) -> Vec<u8> {
    let mut b = oid.to_be_bytes().to_vec();
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&(args.len() as i16).to_be_bytes());
    for a in args {
        b.extend_from_slice(&(a.len() as i32).to_be_bytes());
        b.extend_from_slice(a);
    }
    b.extend_from_slice(&0i16.to_be_bytes());
    msg(b'F', &b)
}

// ---- backend ----

pub fn auth_ok() -> Vec<u8> {
    msg(b'R', &0u32.to_be_bytes())
}

pub fn auth_md5() -> Vec<u8> {
    msg(b'R', &[0, 0, 0, 5, 1, 2, 3, 4])
}

pub fn parameter_status(k: &str, v: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, k.as_bytes());
    cstr(&mut b, v.as_bytes());
    msg(b'S', &b)
}

pub fn backend_key(pid: u32, key: u32) -> Vec<u8> {
    let mut b = pid.to_be_bytes().to_vec();
    b.extend_from_slice(&key.to_be_bytes());
    msg(b'K', &b)
}

pub fn ready(status: u8) -> Vec<u8> {
    msg(b'Z', &[status])
}

/// What the server writes after a successful startup, in one send.
pub fn logged_in() -> Vec<u8> {
    [
        auth_ok(),
        parameter_status("server_version", "15.8"),
        parameter_status("client_encoding", "UTF8"),
        backend_key(4242, 99),
        ready(b'I'),
    ]
    .concat()
}

pub fn row_description(names: &[&str]) -> Vec<u8> {
    let mut b = (names.len() as i16).to_be_bytes().to_vec();
    for n in names {
        cstr(&mut b, n.as_bytes());
        b.extend_from_slice(&[0; 4]); // table oid
        b.extend_from_slice(&[0; 2]); // column number
        b.extend_from_slice(&23u32.to_be_bytes()); // int4
        b.extend_from_slice(&4i16.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
    }
    msg(b'T', &b)
}

pub fn data_row(cols: &[Option<&[u8]>]) -> Vec<u8> {
    let mut b = (cols.len() as i16).to_be_bytes().to_vec();
    for c in cols {
        match c {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
        }
    }
    msg(b'D', &b)
}

/// `n` one-column rows of a `width`-byte value.
pub fn rows(n: usize, width: usize) -> Vec<u8> {
    let v = vec![b'7'; width];
    (0..n).flat_map(|_| data_row(&[Some(&v)])).collect()
}

pub fn command_complete(tag: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, tag.as_bytes());
    msg(b'C', &b)
}

pub fn empty_query() -> Vec<u8> {
    msg(b'I', &[])
}

fn fields(typ: u8, severity: &str, code: &str, message: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (f, v) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', code),
        (b'M', message),
    ] {
        b.push(f);
        cstr(&mut b, v.as_bytes());
    }
    b.push(b'F');
    cstr(&mut b, b"parse_relation.c");
    b.push(0);
    msg(typ, &b)
}

pub fn error(code: &str, message: &str) -> Vec<u8> {
    fields(b'E', "ERROR", code, message)
}

pub fn fatal(code: &str, message: &str) -> Vec<u8> {
    fields(b'E', "FATAL", code, message)
}

pub fn notice(message: &str) -> Vec<u8> {
    fields(b'N', "NOTICE", "00000", message)
}

pub fn notification(pid: u32, channel: &str, payload: &str) -> Vec<u8> {
    let mut b = pid.to_be_bytes().to_vec();
    cstr(&mut b, channel.as_bytes());
    cstr(&mut b, payload.as_bytes());
    msg(b'A', &b)
}

pub fn parse_complete() -> Vec<u8> {
    msg(b'1', &[])
}

pub fn bind_complete() -> Vec<u8> {
    msg(b'2', &[])
}

pub fn close_complete() -> Vec<u8> {
    msg(b'3', &[])
}

pub fn no_data() -> Vec<u8> {
    msg(b'n', &[])
}

pub fn portal_suspended() -> Vec<u8> {
    msg(b's', &[])
}

pub fn parameter_description(oids: &[u32]) -> Vec<u8> {
    let mut b = (oids.len() as i16).to_be_bytes().to_vec();
    for o in oids {
        b.extend_from_slice(&o.to_be_bytes());
    }
    msg(b't', &b)
}

fn copy_response(typ: u8, ncols: i16) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(&ncols.to_be_bytes());
    for _ in 0..ncols {
        b.extend_from_slice(&0i16.to_be_bytes());
    }
    msg(typ, &b)
}

pub fn copy_in_response(ncols: i16) -> Vec<u8> {
    copy_response(b'G', ncols)
}

pub fn copy_out_response(ncols: i16) -> Vec<u8> {
    copy_response(b'H', ncols)
}

pub fn function_call_response(value: &[u8]) -> Vec<u8> {
    let mut b = (value.len() as i32).to_be_bytes().to_vec();
    b.extend_from_slice(value);
    msg(b'V', &b)
}
