//! The Arrow types of the system attributes (pid, comm, time, …) that every
//! event table offers beside its own fields.

use datafusion::arrow::datatypes::DataType;
use ebql_catalog::SystemAttr;

/// Arrow type of a system attribute.
pub fn attr_type(a: SystemAttr) -> DataType {
    match a {
        SystemAttr::Time | SystemAttr::Cgroup => DataType::UInt64,
        SystemAttr::Pid | SystemAttr::Tid | SystemAttr::Uid | SystemAttr::Gid | SystemAttr::Cpu => {
            DataType::UInt32
        }
        SystemAttr::Comm => DataType::Utf8,
    }
}
