//! What `sluice inspect` prints about a model.

use std::fmt::Write as _;

use sluice_graph::{Static, fmt_dims};

use crate::Model;

/// A text report: inputs, outputs, operators, parameters and FLOPs at batch 1.
pub fn report(m: &Model, at_batch_1: Option<&Static>) -> String {
    let g = &m.graph;
    let mut s = String::new();
    let _ = writeln!(s, "model      {}", m.path.display());
    let _ = writeln!(
        s,
        "opset      {} (IR version {}){}",
        m.opset,
        m.ir_version,
        if m.producer.is_empty() {
            String::new()
        } else {
            format!(", made by {}", m.producer)
        }
    );
    let _ = writeln!(
        s,
        "batch      {}",
        if g.has_batch() {
            "symbolic first dimension (N): any batch"
        } else {
            "fixed: the inputs' first dimension is not symbolic, batch 1 only"
        }
    );
    let _ = writeln!(s, "inputs");
    for i in g.inputs() {
        let _ = writeln!(
            s,
            "  {:<24} {:<5} {}",
            i.name,
            i.dtype.name(),
            fmt_dims(&i.shape)
        );
    }
    let _ = writeln!(s, "outputs");
    for o in g.outputs() {
        let info = at_batch_1.and_then(|st| st.info(o.id));
        match info {
            Some((dt, sh)) => {
                let _ = writeln!(
                    s,
                    "  {:<24} {:<5} {:?}{}",
                    o.name,
                    dt.name(),
                    sh,
                    if g.has_batch() { " at batch 1" } else { "" }
                );
            }
            None => {
                let _ = writeln!(s, "  {}", o.name);
            }
        }
    }
    let _ = writeln!(
        s,
        "operators  {} nodes in the file",
        m.op_counts.values().sum::<usize>()
    );
    for (op, n) in &m.op_counts {
        let _ = writeln!(s, "  {op:<24} {n}");
    }
    let _ = writeln!(s, "unsupported operators: none");
    let _ = writeln!(
        s,
        "parameters {} elements, {} bytes",
        g.param_count(),
        g.param_bytes()
    );
    if let Some(st) = at_batch_1 {
        let _ = writeln!(
            s,
            "kernels    {} after folding and fusion",
            st.nodes().len()
        );
        let _ = writeln!(
            s,
            "FLOPs      {:.3} G per batch-1 run (estimated: 2 per multiply-add, 1 per element otherwise)",
            st.flops() as f64 / 1e9
        );
    }
    s
}
