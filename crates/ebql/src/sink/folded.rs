//! `--format folded`: flame-graph "folded" lines (`frame;frame;frame count`,
//! root first), the input of flamegraph.pl and inferno: per row, the string
//! columns joined by `;` in column order (e.g. `comm, ustack`), offsets
//! (`+0x…`) dropped, then the row's integer column as the count; equal
//! stacks of a window are summed. Needs exactly one integer column.

use arrow::record_batch::RecordBatch;

use super::contract::{QueryInfo, Sink, SinkError, TextOutput};
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

/// The folded lines of a batch: (stack, count), equal stacks summed, in
/// first-seen order. Errors say which columns the result lacks.
pub fn folded(batch: &RecordBatch) -> Result<Vec<(String, u64)>, String> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, UInt64Type};
    let schema = batch.schema();
    let data: Vec<usize> = (0..batch.num_columns())
        .filter(|&i| {
            !matches!(
                schema.field(i).name().as_str(),
                "window_start" | "window_end"
            )
        })
        .collect();
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
    let [count_col] = ints[..] else {
        return Err(format!("--format folded needs exactly one integer column (the count, e.g. COUNT(*)), the result has {}", ints.len()));
    };
    if strings.is_empty() {
        return Err(
            "--format folded needs a string column (a stack such as ustack, or comm)".into(),
        );
    }
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
    use arrow::datatypes::{DataType, Field, Schema};
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
        assert!(folded(&no_count)
            .unwrap_err()
            .contains("exactly one integer column"));
    }
}
