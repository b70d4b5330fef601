//! Code generation for kprobe arguments (pt_regs loads) and BTF field paths
//! (fentry/tp_btf: direct loads through struct pointers; raw_tp: probe
//! reads), checked on the disassembly. Schemas are built by hand (no
//! kernel needed): `vfs_read(struct file *file, …)` with `file.f_inode.i_ino`
//! at the offsets given here.

use ebql_catalog::{
    Access, Attach, BtfStep, CatalogError, EventKind, EventName, EventSchema, FieldKind,
    SystemAttr, TraceField,
};
use ebql_compiler::planner::EventSource;
use ebql_compiler::{compile_query, CodegenOptions};

struct Fixed;

fn int(name: &str, c_type: &str, size: u32, access: Access, offset: u32) -> TraceField {
    TraceField {
        name: name.into(),
        c_type: c_type.into(),
        offset,
        size,
        kind: FieldKind::Int { signed: false },
        access,
    }
}

/// `file.f_inode` at 32 (a pointer), `i_ino` at 64 of the inode.
fn ino_path(direct: bool) -> Access {
    Access::Btf {
        arg: 0,
        steps: vec![
            BtfStep {
                offset: 32,
                deref: true,
            },
            BtfStep {
                offset: 64,
                deref: false,
            },
        ],
        direct,
    }
}

impl EventSource for Fixed {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        let fields = match name.kind {
            EventKind::Kprobe => vec![
                int("arg0", "u64", 8, Access::Ctx, 112),
                int("arg2", "u64", 8, Access::Ctx, 96),
            ],
            _ => vec![TraceField {
                name: "file".into(),
                c_type: "struct file *".into(),
                offset: 0,
                size: 8,
                kind: FieldKind::Pointer,
                access: Access::Btf {
                    arg: 0,
                    steps: vec![],
                    direct: name.kind != EventKind::RawTracepoint,
                },
            }],
        };
        let attach = match name.kind {
            EventKind::Kprobe => Attach::Kprobe {
                function: name.name.clone(),
                retprobe: false,
            },
            _ => Attach::Btf {
                name: name.name.clone(),
                btf_id: 1,
            },
        };
        Ok(EventSchema {
            event: name.clone(),
            attach,
            fields,
            attrs: SystemAttr::ALL.to_vec(),
        })
    }

    fn field_path(
        &self,
        event: &EventSchema,
        path: &[String],
    ) -> Result<Option<TraceField>, CatalogError> {
        let direct = event.event.kind != EventKind::RawTracepoint;
        Ok((path.join(".") == "file.f_inode.i_ino").then(|| {
            int(
                "file.f_inode.i_ino",
                "long unsigned int",
                8,
                ino_path(direct),
                0,
            )
        }))
    }
}

fn disasm(sql: &str) -> String {
    let q = compile_query(sql, &Fixed, &CodegenOptions::default())
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    ebql_compiler::explain::explain(&q)
}

#[test]
fn kprobe_argument_is_a_pt_regs_load() {
    let text = disasm("SELECT COUNT(*) FROM kprobe:vfs_read WHERE arg2 = 4096");
    assert!(
        text.contains("r1 = *(u64 *)(r6 + 96)"),
        "rdx is at pt_regs+96:\n{text}"
    );
}

#[test]
fn fentry_field_path_is_two_direct_loads() {
    let text = disasm("SELECT COUNT(*) FROM fentry:vfs_read WHERE file.f_inode.i_ino = 7");
    let want = [
        "r1 = *(u64 *)(r6 + 0)",
        "r1 = *(u64 *)(r1 + 32)",
        "r1 = *(u64 *)(r1 + 64)",
        "if r1 != 0x7",
    ];
    let at: Vec<Option<usize>> = want.iter().map(|w| text.find(w)).collect();
    assert!(
        at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1]),
        "{want:?} in order:\n{text}"
    );
    assert!(!text.contains("probe_read"), "{text}");
}

#[test]
fn raw_tp_field_path_is_probe_reads() {
    let text = disasm("SELECT COUNT(*) FROM raw_tp:fs:vfs_read WHERE file.f_inode.i_ino = 7");
    assert_eq!(
        text.matches("call bpf_probe_read_kernel#113").count(),
        2,
        "one read per step:\n{text}"
    );
    assert!(
        text.contains("r3 += 32") && text.contains("r3 += 64"),
        "{text}"
    );
}
