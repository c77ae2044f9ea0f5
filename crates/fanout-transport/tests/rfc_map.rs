//! `docs/rfc-map.md` names, for every rule, the file that ships it: each
//! Rust file it names must exist in the workspace, and each item named next
//! to a file (`` `file.rs` `Type::item` ``) must appear in that file, so the
//! map cannot keep pointing at code that moved or was deleted.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_file_and_item_the_rfc_map_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let map = std::fs::read_to_string(root.join("docs/rfc-map.md")).unwrap();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let mut checked = 0;
    for line in map.lines().filter(|l| l.starts_with('|')) {
        // Code spans in order; an item follows the file it belongs to.
        let spans: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        // Every file of that name (several crates may have one).
        let mut file: Vec<&PathBuf> = Vec::new();
        for span in spans {
            if let Some(path) = span.strip_suffix(".rs").map(|_| span) {
                let matches: Vec<&PathBuf> = files
                    .iter()
                    .filter(|f| f.to_string_lossy().ends_with(&format!("/{path}")))
                    .collect();
                assert!(
                    !matches.is_empty(),
                    "{path} named in rfc-map.md: no such file"
                );
                file = matches;
                checked += 1;
            } else if !file.is_empty() {
                // `Type::item`, `item`, `item` (module): the last name must
                // occur in the file (a declaration or a use).
                let name = span
                    .rsplit("::")
                    .next()
                    .unwrap()
                    .trim_end_matches("()")
                    .trim();
                if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let in_module = |f: &PathBuf| {
                    let siblings = f.with_extension("");
                    std::fs::read_to_string(f).unwrap().contains(name)
                        || (siblings.is_dir() && {
                            let mut sub = Vec::new();
                            rust_files(&siblings, &mut sub);
                            sub.iter()
                                .any(|s| std::fs::read_to_string(s).unwrap().contains(name))
                        })
                };
                assert!(
                    file.iter().any(|f| in_module(f)),
                    "{name} named next to {} in rfc-map.md: not found there",
                    file[0].display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} names checked");
}
