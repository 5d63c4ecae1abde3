//! The benchmarks' text tables, laid out by comfy-table: a rule under the
//! header, `|` between columns, text columns left-aligned and number
//! columns right-aligned.

use comfy_table::{CellAlignment, Table};

/// No outer border, a `-` rule under the header, `|` between columns, no
/// rule between rows (comfy-table's preset characters, in its order).
const STYLE: &str = "     -+ |          ";

/// A table with `header`: the first `text` columns left-aligned, the rest
/// (numbers) right-aligned. Add rows with `add_row`; `to_string` lays it
/// out.
pub fn new(header: &[&str], text: usize) -> Table {
    let mut t = Table::new();
    t.load_preset(STYLE).set_header(header.iter().copied());
    for c in t.column_iter_mut().skip(text) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    t
}

/// `t` laid out, with a newline at the end.
pub fn lines(t: &Table) -> String {
    let mut s: String = t
        .lines()
        .map(|l| l.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_line_up_on_the_right() {
        let mut t = super::new(&["name", "ms"], 1);
        t.add_row(vec!["a".to_owned(), "1.5".to_owned()]);
        t.add_row(vec!["longer".to_owned(), "12.25".to_owned()]);
        let s = super::lines(&t);
        let rows: Vec<&str> = s.lines().collect();
        assert_eq!(rows.len(), 4, "{s}");
        assert!(rows[0].contains("name") && rows[0].contains("ms"), "{s}");
        assert!(rows[1].chars().all(|c| c == '-' || c == '+'), "{s}");
        assert!(
            rows[2].ends_with("  1.5") && rows[3].ends_with("12.25"),
            "{s}"
        );
        for r in [rows[0], rows[2]] {
            assert_eq!(r.len(), rows[3].len(), "{s}");
        }
    }
}
