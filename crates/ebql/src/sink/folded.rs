//! `--format folded`: flame-graph "folded" lines (`frame;frame;frame count`,
//! root first), the input of flamegraph.pl and inferno: per row, the string
//! columns joined by `;` in column order (e.g. `comm, ustack`), offsets
//! (`+0x…`) dropped, then the row's integer column as the count; equal
//! stacks of a window are summed. Needs a string column and exactly one
//! integer column: [`check_schema`] refuses other results before the query
//! attaches, naming what is missing.

use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::contract::{FormatRefused, QueryInfo, Sink, SinkError, TextOutput};
use crate::window::{QueryStats, WindowBatch};

/// Writes each window's rows as folded stacks.
pub struct FoldedSink {
    out: TextOutput,
}

impl FoldedSink {
    /// A folded-stacks sink writing to `out`.
    pub fn new(out: TextOutput) -> FoldedSink {
        FoldedSink { out }
    }
}

impl Sink for FoldedSink {
    fn open(&mut self, _: &QueryInfo) -> Result<(), SinkError> {
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        let lines = folded(&w.batch).map_err(|e| SinkError::new("folding stacks", e))?;
        let text: String = lines
            .iter()
            .map(|(stack, count)| format!("{stack} {count}\n"))
            .collect();
        self.out.write_all(text.as_bytes())
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}

/// A frame without its `+0x…` offset (`main+0x1f` → `main`).
fn frame_name(frame: &str) -> &str {
    match frame.rsplit_once("+0x") {
        Some((name, off))
            if !name.is_empty()
                && !off.is_empty()
                && off.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            name
        }
        _ => frame,
    }
}

/// Refuses a result schema without the columns folded lines are made of:
/// the stack (string columns) and the count (one integer column).
pub fn check_schema(schema: &SchemaRef) -> Result<(), FormatRefused> {
    columns(schema).map(|_| ())
}

/// The string columns (frames, in order) and the integer column (the count)
/// of `schema`, window bounds aside; the refusal names what is missing.
fn columns(schema: &Schema) -> Result<(Vec<usize>, usize), FormatRefused> {
    let data: Vec<usize> = (crate::window::bound_columns(schema)..schema.fields().len()).collect();
    let strings: Vec<usize> = data
        .iter()
        .copied()
        .filter(|&i| {
            matches!(
                schema.field(i).data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        })
        .collect();
    let ints: Vec<usize> = data
        .iter()
        .copied()
        .filter(|&i| schema.field(i).data_type().is_integer())
        .collect();
    let names = |cols: &[usize]| {
        cols.iter()
            .map(|&i| schema.field(i).name().as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if strings.is_empty() {
        return Err(FormatRefused {
            problem: "--format folded needs a stack column (a string column such as ustack, kstack or comm); the result has none".into(),
            hint: "select and group by a stack, e.g. `SELECT ustack, COUNT(*) FROM profile:hz:99 GROUP BY ustack`".into(),
        });
    }
    match ints[..] {
        [count] => Ok((strings, count)),
        [] => Err(FormatRefused {
            problem: format!(
                "--format folded needs a count (one integer column); the result has none besides the stack ({})",
                names(&strings)
            ),
            hint: "add COUNT(*) to the SELECT list".into(),
        }),
        _ => Err(FormatRefused {
            problem: format!(
                "--format folded needs exactly one integer column (the count); the result has {} ({})",
                ints.len(),
                names(&ints)
            ),
            hint: "keep one count in the SELECT list; a number to show in the stack can be CAST to a string".into(),
        }),
    }
}

/// The folded lines of a batch: (stack, count), equal stacks summed, in
/// first-seen order. Errors say which columns the result lacks.
pub fn folded(batch: &RecordBatch) -> Result<Vec<(String, u64)>, String> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::UInt64Type;
    let (strings, count_col) = columns(&batch.schema()).map_err(|e| e.to_string())?;
    let counts = arrow::compute::cast(batch.column(count_col), &DataType::UInt64)
        .map_err(|e| e.to_string())?;
    let counts = counts.as_primitive::<UInt64Type>();
    let texts: Vec<_> = strings
        .iter()
        .map(|&i| arrow::compute::cast(batch.column(i), &DataType::Utf8).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for row in 0..batch.num_rows() {
        let frames: Vec<&str> = texts
            .iter()
            .map(|c| c.as_string::<i32>())
            .filter(|c| !c.is_null(row) && !c.value(row).is_empty())
            .flat_map(|c| c.value(row).split(';'))
            .map(frame_name)
            .collect();
        let stack = frames.join(";");
        let n = if counts.is_null(row) {
            0
        } else {
            counts.value(row)
        };
        match at.get(&stack) {
            Some(&i) => out[i].1 += n,
            None => {
                at.insert(stack.clone(), out.len());
                out.push((stack, n));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, UInt64Array};
    use arrow::datatypes::Field;
    use std::sync::Arc;

    #[test]
    fn folded_lines_join_strings_root_first_and_sum_equal_stacks() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("comm", DataType::Utf8, false),
            Field::new("ustack", DataType::Utf8, false),
            Field::new("n", DataType::UInt64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["w", "w", "w"])),
                Arc::new(StringArray::from(vec![
                    "main+0x10;spin+0x4f",
                    "main+0x10;spin+0x2b",
                    "[no stack: x (EFAULT)]",
                ])),
                Arc::new(UInt64Array::from(vec![3, 4, 2])),
            ],
        )
        .unwrap();
        assert_eq!(
            folded(&batch).unwrap(),
            vec![
                ("w;main;spin".to_string(), 7),
                ("w;[no stack: x (EFAULT)]".to_string(), 2)
            ]
        );
        assert_eq!(frame_name("a+b+0x1f"), "a+b");
        assert_eq!(frame_name("0x7f00"), "0x7f00");
        let no_count = batch.project(&[0, 1]).unwrap();
        assert!(folded(&no_count).unwrap_err().contains("needs a count"));
    }

    #[test]
    fn a_schema_without_stack_or_count_is_refused_naming_what_is_missing() {
        let schema = |cols: &[(&str, DataType)]| {
            Arc::new(Schema::new(
                cols.iter()
                    .map(|(n, t)| Field::new(*n, t.clone(), false))
                    .collect::<Vec<_>>(),
            ))
        };
        let ok = schema(&[
            ("window_start", DataType::UInt64),
            ("window_end", DataType::UInt64),
            ("ustack", DataType::Utf8),
            ("n", DataType::UInt64),
        ]);
        assert_eq!(check_schema(&ok), Ok(()));
        // A time window's four columns (two of them integers) are not the count.
        let mut time = crate::window::bound_fields(true);
        time.extend([
            Field::new("ustack", DataType::Utf8, false),
            Field::new("n", DataType::UInt64, false),
        ]);
        assert_eq!(check_schema(&Arc::new(Schema::new(time))), Ok(()));
        let no_stack = check_schema(&schema(&[
            ("fd", DataType::UInt32),
            ("n", DataType::UInt64),
        ]))
        .unwrap_err();
        assert!(
            no_stack.problem.contains("needs a stack column"),
            "{no_stack}"
        );
        assert!(no_stack.hint.contains("GROUP BY ustack"), "{no_stack}");
        let no_count = check_schema(&schema(&[("comm", DataType::Utf8)])).unwrap_err();
        assert!(no_count.problem.contains("needs a count"), "{no_count}");
        assert!(no_count.hint.contains("COUNT(*)"), "{no_count}");
        let two = check_schema(&schema(&[
            ("comm", DataType::Utf8),
            ("fd", DataType::UInt32),
            ("n", DataType::UInt64),
        ]))
        .unwrap_err();
        assert!(two.problem.contains("has 2 (fd, n)"), "{two}");
    }
}
