//! Numbers shown as the names people know, in user space:
//!
//! * `syscall_name(id)`: an x86-64 system call number (`raw_syscalls`'
//!   `id`, `__syscall_nr`) as its name (`openat`), from the table the
//!   catalog already keeps (`ebql_catalog::syscalls`); NULL for a number
//!   that names none (e.g. -1).
//! * `errno_name(ret)`: a negative return value as its errno name (`-2` →
//!   `ENOENT`, Linux's asm-generic numbering); NULL for `ret >= 0` (not an
//!   error: a `read` of 2 bytes is not ENOENT) and for unknown numbers.
//! * `inet_ntop(addr)`: an IPv4 address as the TC hook's `saddr`/`daddr`
//!   hold it (`a<<24 | b<<16 | c<<8 | d`) as `a.b.c.d`; `inet_ntop(hi, lo)`:
//!   an IPv6 address from its two big-endian halves (`saddr6_hi`,
//!   `saddr6_lo`) in RFC 5952 text (`::1`). NULL in, NULL out.
//!
//! All three are pure (Immutable) and run where DataFusion evaluates them;
//! the kernel keeps the numbers (a GROUP BY of the name groups by the name).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Int64Type, UInt64Type};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use std::sync::Arc;

/// Linux's errno names by number (include/uapi/asm-generic/errno-base.h and errno.h).
const ERRNO: [&str; 134] = [
    "",
    "EPERM",
    "ENOENT",
    "ESRCH",
    "EINTR",
    "EIO",
    "ENXIO",
    "E2BIG",
    "ENOEXEC",
    "EBADF",
    "ECHILD",
    "EAGAIN",
    "ENOMEM",
    "EACCES",
    "EFAULT",
    "ENOTBLK",
    "EBUSY",
    "EEXIST",
    "EXDEV",
    "ENODEV",
    "ENOTDIR",
    "EISDIR",
    "EINVAL",
    "ENFILE",
    "EMFILE",
    "ENOTTY",
    "ETXTBSY",
    "EFBIG",
    "ENOSPC",
    "ESPIPE",
    "EROFS",
    "EMLINK",
    "EPIPE",
    "EDOM",
    "ERANGE",
    "EDEADLK",
    "ENAMETOOLONG",
    "ENOLCK",
    "ENOSYS",
    "ENOTEMPTY",
    "ELOOP",
    "",
    "ENOMSG",
    "EIDRM",
    "ECHRNG",
    "EL2NSYNC",
    "EL3HLT",
    "EL3RST",
    "ELNRNG",
    "EUNATCH",
    "ENOCSI",
    "EL2HLT",
    "EBADE",
    "EBADR",
    "EXFULL",
    "ENOANO",
    "EBADRQC",
    "EBADSLT",
    "",
    "EBFONT",
    "ENOSTR",
    "ENODATA",
    "ETIME",
    "ENOSR",
    "ENONET",
    "ENOPKG",
    "EREMOTE",
    "ENOLINK",
    "EADV",
    "ESRMNT",
    "ECOMM",
    "EPROTO",
    "EMULTIHOP",
    "EDOTDOT",
    "EBADMSG",
    "EOVERFLOW",
    "ENOTUNIQ",
    "EBADFD",
    "EREMCHG",
    "ELIBACC",
    "ELIBBAD",
    "ELIBSCN",
    "ELIBMAX",
    "ELIBEXEC",
    "EILSEQ",
    "ERESTART",
    "ESTRPIPE",
    "EUSERS",
    "ENOTSOCK",
    "EDESTADDRREQ",
    "EMSGSIZE",
    "EPROTOTYPE",
    "ENOPROTOOPT",
    "EPROTONOSUPPORT",
    "ESOCKTNOSUPPORT",
    "EOPNOTSUPP",
    "EPFNOSUPPORT",
    "EAFNOSUPPORT",
    "EADDRINUSE",
    "EADDRNOTAVAIL",
    "ENETDOWN",
    "ENETUNREACH",
    "ENETRESET",
    "ECONNABORTED",
    "ECONNRESET",
    "ENOBUFS",
    "EISCONN",
    "ENOTCONN",
    "ESHUTDOWN",
    "ETOOMANYREFS",
    "ETIMEDOUT",
    "ECONNREFUSED",
    "EHOSTDOWN",
    "EHOSTUNREACH",
    "EALREADY",
    "EINPROGRESS",
    "ESTALE",
    "EUCLEAN",
    "ENOTNAM",
    "ENAVAIL",
    "EISNAM",
    "EREMOTEIO",
    "EDQUOT",
    "ENOMEDIUM",
    "EMEDIUMTYPE",
    "ECANCELED",
    "ENOKEY",
    "EKEYEXPIRED",
    "EKEYREVOKED",
    "EKEYREJECTED",
    "EOWNERDEAD",
    "ENOTRECOVERABLE",
    "ERFKILL",
    "EHWPOISON",
];

/// The name of system call `nr` on x86-64.
pub fn syscall_name(nr: i64) -> Option<&'static str> {
    let nr = u32::try_from(nr).ok()?;
    ebql_catalog::syscalls::SYSCALLS_X86_64
        .iter()
        .find(|(_, n)| *n == nr)
        .map(|(name, _)| *name)
}

/// The errno name of a negative return value `ret`.
pub fn errno_name(ret: i64) -> Option<&'static str> {
    let e = usize::try_from(ret.checked_neg()?).ok()?;
    ERRNO.get(e).copied().filter(|n| !n.is_empty())
}

/// One of the three functions.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NameFn {
    name: &'static str,
    signature: Signature,
}

impl NameFn {
    fn new(name: &'static str) -> NameFn {
        let signature = match name {
            "inet_ntop" => Signature::one_of(
                vec![
                    TypeSignature::Uniform(1, vec![DataType::UInt64]),
                    TypeSignature::Uniform(2, vec![DataType::UInt64]),
                ],
                Volatility::Immutable,
            ),
            _ => Signature::uniform(1, vec![DataType::Int64], Volatility::Immutable),
        };
        NameFn { name, signature }
    }

    fn one(&self, args: &[&ArrayRef], i: usize) -> Option<String> {
        if args.iter().any(|a| a.is_null(i)) {
            return None;
        }
        match self.name {
            "syscall_name" => {
                syscall_name(args[0].as_primitive::<Int64Type>().value(i)).map(str::to_string)
            }
            "errno_name" => {
                errno_name(args[0].as_primitive::<Int64Type>().value(i)).map(str::to_string)
            }
            _ => {
                let v = |k: usize| args[k].as_primitive::<UInt64Type>().value(i);
                Some(match args.len() {
                    1 => std::net::Ipv4Addr::from(v(0) as u32).to_string(),
                    _ => {
                        std::net::Ipv6Addr::from(((v(0) as u128) << 64) | v(1) as u128).to_string()
                    }
                })
            }
        }
    }
}

impl ScalarUDFImpl for NameFn {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(args.number_rows))
            .collect::<Result<_>>()?;
        if self.name == "inet_ntop" && !(1..=2).contains(&arrays.len()) {
            return exec_err!("inet_ntop() takes an IPv4 address, or an IPv6 address's two halves");
        }
        let refs: Vec<&ArrayRef> = arrays.iter().collect();
        let out: StringArray = (0..args.number_rows).map(|i| self.one(&refs, i)).collect();
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(Arc::new(out))
        })
    }
}

/// Registers `syscall_name`, `errno_name` and `inet_ntop` in `ctx`.
pub fn register(ctx: &SessionContext) {
    for name in ["syscall_name", "errno_name", "inet_ntop"] {
        ctx.register_udf(ScalarUDF::from(NameFn::new(name)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_numbers() {
        assert_eq!(syscall_name(257), Some("openat"));
        assert_eq!(syscall_name(0), Some("read"));
        assert_eq!(syscall_name(-1), None);
        assert_eq!(errno_name(-2), Some("ENOENT"));
        assert_eq!(errno_name(-133), Some("EHWPOISON"));
        assert_eq!(errno_name(-41), None, "41 is unused");
        assert_eq!(errno_name(2), None, "not an error");
        assert_eq!(errno_name(i64::MIN), None);
        assert_eq!(ERRNO[110], "ETIMEDOUT");
        assert_eq!(ERRNO[111], "ECONNREFUSED");
        assert_eq!(ERRNO[125], "ECANCELED");
    }

    #[test]
    fn in_sql() {
        let ctx = SessionContext::new();
        register(&ctx);
        let sql = "SELECT syscall_name(257) AS s, errno_name(CAST(-9 AS INT)) AS e, \
                   inet_ntop(CAST(2130706433 AS INT UNSIGNED)) AS v4, \
                   inet_ntop(CAST(0 AS BIGINT UNSIGNED), CAST(1 AS BIGINT UNSIGNED)) AS v6, \
                   errno_name(NULL) AS n";
        let batches =
            futures::executor::block_on(async { ctx.sql(sql).await?.collect().await }).unwrap();
        let b = &batches[0];
        let text = |c: &str| {
            let a = b.column_by_name(c).unwrap().as_string::<i32>();
            (!a.is_null(0)).then(|| a.value(0).to_string())
        };
        assert_eq!(text("s").as_deref(), Some("openat"));
        assert_eq!(text("e").as_deref(), Some("EBADF"));
        assert_eq!(text("v4").as_deref(), Some("127.0.0.1"));
        assert_eq!(text("v6").as_deref(), Some("::1"));
        assert_eq!(text("n"), None);
    }
}
