//! Damaged tables: every kind of damage gives an error naming the file (and page), never a
//! panic; interrupted and refused loads leave nothing half-written visible.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::*;
use arrow::buffer::Buffer;
use arrow::datatypes::*;
use ooode::storage::page::{PageKind, seal_page};
use ooode::storage::{
    KeyEncoder, KeyRange, LoadOptions, StorageError, Table, TableWriter, load_batches,
};

fn sample(n: i64) -> (SchemaRef, RecordBatch) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("grp", DataType::Int32, false),
        Field::new("name", DataType::Utf8View, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(Int32Array::from_iter_values(
                (0..n).map(|i| (i % 13) as i32),
            )),
            Arc::new(StringViewArray::from_iter(
                (0..n).map(|i| (i % 5 != 0).then(|| format!("name-{i}"))),
            )),
        ],
    )
    .unwrap();
    (schema, batch)
}

fn make_table(dir: &Path) -> PathBuf {
    let (schema, batch) = sample(20_000);
    let path = dir.join("t");
    let options = LoadOptions {
        clustering_key: vec!["id".into()],
        indexes: vec![vec!["grp".into()]],
        ..Default::default()
    };
    load_batches(&path, schema, [Ok::<_, String>(batch)], options).unwrap();
    path
}

fn flip_byte(file: &Path, offset: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x20;
    f.write_all_at(&b, offset).unwrap();
}

fn grp_key(v: i32) -> Vec<u8> {
    let f: FieldRef = Arc::new(Field::new("grp", DataType::Int32, false));
    KeyEncoder::new(&[f])
        .unwrap()
        .encode_row(&[Arc::new(Int32Array::from(vec![v]))], 0)
        .unwrap()
}

fn all_ok(table: &Table) -> Result<usize, StorageError> {
    let mut rows = 0;
    for b in table.scan(None) {
        rows += b?.num_rows();
    }
    for v in 0..13 {
        table
            .index_on(&["grp"])
            .unwrap()
            .lookup(KeyRange::point(grp_key(v)))?;
    }
    Ok(rows)
}

#[test]
fn intact_table_reads() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::open(make_table(dir.path())).unwrap();
    assert_eq!(all_ok(&table).unwrap(), 20_000);
}

#[test]
fn flipped_heap_byte_names_file_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_table(dir.path());
    flip_byte(&path.join("heap.0.pages"), 8192 * 3 + 500);
    let table = Table::open(&path).unwrap();
    let msg = all_ok(&table).unwrap_err().to_string();
    assert!(
        msg.contains("heap.0.pages") && msg.contains("page 3") && msg.contains("checksum"),
        "{msg}"
    );
}

#[test]
fn flipped_index_byte_names_file_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_table(dir.path());
    let table = Table::open(&path).unwrap();
    let root = table.index_on(&["grp"]).unwrap().meta.tree.root;
    drop(table);
    flip_byte(&path.join("index_grp.0.pages"), root * 8192 + 100);
    let table = Table::open(&path).unwrap();
    let msg = all_ok(&table).unwrap_err().to_string();
    assert!(
        msg.contains("index_grp.0.pages") && msg.contains(&format!("page {root}")),
        "{msg}"
    );
}

#[test]
fn damaged_manifest_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_table(dir.path());
    let m = path.join("manifest.json");
    let text = std::fs::read_to_string(&m).unwrap();
    // A changed value (the row count) fails the checksum; broken JSON fails parsing.
    std::fs::write(
        &m,
        text.replace("\"row_count\": 20000", "\"row_count\": 20001"),
    )
    .unwrap();
    let msg = Table::open(&path).unwrap_err().to_string();
    assert!(
        msg.contains("manifest.json") && msg.contains("checksum"),
        "{msg}"
    );
    std::fs::write(&m, &text[..text.len() / 2]).unwrap();
    let msg = Table::open(&path).unwrap_err().to_string();
    assert!(msg.contains("manifest.json"), "{msg}");
    std::fs::write(
        &m,
        text.replace("\"format_version\": 1", "\"format_version\": 9"),
    )
    .unwrap();
    let err = Table::open(&path).unwrap_err();
    assert!(
        matches!(err, StorageError::FormatVersion { found: 9, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("manifest.json"));
}

#[test]
fn truncated_and_missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_table(dir.path());
    let heap = path.join("heap.0.pages");
    let len = std::fs::metadata(&heap).unwrap().len();
    let f = OpenOptions::new().write(true).open(&heap).unwrap();
    f.set_len(len - 2 * 8192).unwrap();
    let msg = Table::open(&path).unwrap_err().to_string();
    assert!(
        msg.contains("heap.0.pages") && msg.contains("truncated"),
        "{msg}"
    );
    f.set_len(len).unwrap(); // the lost tail reads back as zeros: a damaged page
    let table = Table::open(&path).unwrap();
    let last = table.manifest().heap_pages - 1;
    let msg = table.read_heap_page(last, None).unwrap_err().to_string();
    assert!(
        msg.contains("heap.0.pages") && msg.contains(&format!("page {last}")),
        "{msg}"
    );
    std::fs::remove_file(path.join("index_grp.0.pages")).unwrap();
    let msg = Table::open(&path).unwrap_err().to_string();
    assert!(msg.contains("index_grp.0.pages"), "{msg}");
    let msg = Table::open(dir.path().join("nowhere"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("nowhere") && msg.contains("not an ooode table"),
        "{msg}"
    );
    let msg = Table::open(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("manifest.json"), "{msg}");
}

#[test]
fn page_of_another_format_version_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_table(dir.path());
    let heap = path.join("heap.0.pages");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&heap)
        .unwrap();
    let mut page = vec![0u8; 8192];
    f.read_exact_at(&mut page, 8192 * 2).unwrap();
    seal_page(&mut page, PageKind::Heap, 2);
    page[4] = 2; // a future version, sealed with a valid checksum
    page[16..20].fill(0);
    let crc = {
        let c = crc32c::crc32c(&page[..16]);
        let c = crc32c::crc32c_append(c, &[0; 4]);
        crc32c::crc32c_append(c, &page[20..])
    };
    page[16..20].copy_from_slice(&crc.to_le_bytes());
    f.seek(SeekFrom::Start(8192 * 2)).unwrap();
    f.write_all(&page).unwrap();
    let table = Table::open(&path).unwrap();
    let err = table.read_heap_page(2, None).unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::FormatVersion {
                page: Some(2),
                found: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("heap.0.pages"));
}

/// Damage behind a valid checksum (a bug, or a collision) must still not panic the decoder.
#[test]
fn damaged_heap_bodies_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_table(dir.path());
    let table = Table::open(&path).unwrap();
    let page = table.heap().read_page(1).unwrap();
    let mut x: u64 = 7;
    let (mut errors, mut shared_errors, mut fixed_read) = (0, 0, 0);
    let all: Vec<usize> = (0..table.schema().fields().len()).collect();
    // The fixed-width columns, which an index join's probes read in place, undecoded.
    let fixed = [0, 1];
    let fixed_schema = Arc::new(table.schema().project(&fixed).unwrap());
    for _ in 0..3000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut p = page.to_vec();
        // Mostly the directory and region starts, where damage is most dangerous.
        let pos = if x.is_multiple_of(2) {
            24 + (x >> 8) as usize % 64
        } else {
            24 + (x >> 8) as usize % (8192 - 24)
        };
        p[pos] = (x >> 40) as u8;
        seal_page(&mut p, PageKind::Heap, 1);
        let file = Path::new("heap.0.pages");
        if table.codec().decode(&p, None, file, 1).is_err() {
            errors += 1;
        }
        // Read in place, those columns must be rejected where decoding them is, and read
        // the decoded values (never outside the page) where it is not.
        let decoded = (table.codec()).decode_projected(&p, &fixed, &fixed_schema, file, 1);
        let layout = table.codec().fixed_layout(&p, &fixed, file, 1);
        assert_eq!(layout.is_ok(), decoded.is_ok(), "{layout:?} / {decoded:?}");
        if let (Ok(layout), Ok(decoded)) = (layout, decoded) {
            fixed_read += 1;
            let ids = decoded.column(0).as_primitive::<Int64Type>();
            let groups = decoded.column(1).as_primitive::<Int32Type>();
            for row in 0..layout.rows() {
                let id = layout.column(0).value(&p, row);
                assert_eq!(id, ids.value(row).to_le_bytes().as_slice());
                let group = layout.column(1).value(&p, row);
                assert_eq!(group, groups.value(row).to_le_bytes().as_slice());
            }
        }
        // The engine's decode: columns that are slices of the page itself, not copies.
        let shared = table.codec().decode_projected_shared(
            &Buffer::from_vec(p),
            &all,
            table.schema(),
            file,
            1,
        );
        if shared.is_err() {
            shared_errors += 1;
        }
    }
    assert!(errors > 100, "damage went unnoticed: {errors} errors");
    assert_eq!(shared_errors, errors, "the two decoders disagree");
    assert!(fixed_read > 100, "only {fixed_read} pages read in place");
}

#[test]
fn interrupted_load_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (schema, batch) = sample(5000);
    let options = LoadOptions {
        clustering_key: vec!["id".into()],
        ..Default::default()
    };
    let mut w = TableWriter::create(dir.path().join("t"), schema.clone(), options.clone()).unwrap();
    w.write(&batch).unwrap();
    drop(w); // interrupted before finish
    assert!(!dir.path().join("t").exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "temporary files left behind"
    );

    // A failing input stream aborts the load the same way.
    let input = vec![Ok(batch.clone()), Err("input broke".to_string())];
    let err =
        load_batches(dir.path().join("t"), schema.clone(), input, options.clone()).unwrap_err();
    assert!(err.to_string().contains("input broke"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn existing_table_is_kept_unless_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_table(dir.path());
    let (schema, batch) = sample(10);
    let options = LoadOptions {
        clustering_key: vec!["id".into()],
        ..Default::default()
    };
    let err = load_batches(
        &path,
        schema.clone(),
        [Ok::<_, String>(batch.clone())],
        options.clone(),
    )
    .unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists { .. }), "{err}");
    assert_eq!(all_ok(&Table::open(&path).unwrap()).unwrap(), 20_000);
    let replace = LoadOptions {
        replace: true,
        ..options
    };
    load_batches(&path, schema, [Ok::<_, String>(batch)], replace).unwrap();
    let table = Table::open(&path).unwrap();
    assert_eq!(table.manifest().row_count, 10);
    assert!(
        !path.join("index_grp.0.pages").exists(),
        "old table's files left"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}
