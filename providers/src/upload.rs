//! Putting a table loaded in a local staging directory into object storage, so that it
//! appears whole or not at all.
//!
//! ```text
//!   HEAD <url>/manifest.json: a table there? refused unless replacing; replacing deletes
//!        the old manifest first (the old table disappears, it is never mixed with the new)
//!   page files and columnar copy: multipart uploads (one PUT when small)
//!   manifest.json last: the commit
//!   then objects of the old table the new one does not name are deleted
//! ```
//!
//! A failed upload deletes what it put and says which objects it could not delete.

use std::path::Path;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use ooode::storage::manifest::MANIFEST_FILE;
use tokio::io::AsyncReadExt;

/// Files up to this size go in one PUT; larger ones in parts of this size.
const PART_BYTES: usize = 8 << 20;
/// Parts of one file in flight at once.
const PARTS_IN_FLIGHT: usize = 4;

fn failed(url: &str, what: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("ooode table {url}: {what}"))
}

/// Whether a table (its manifest) exists at `prefix`.
pub async fn table_exists(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
) -> Result<bool> {
    match store.head(&prefix.clone().join(MANIFEST_FILE)).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(failed(url, format!("HEAD {MANIFEST_FILE}: {e}"))),
    }
}

/// Uploads the table in `local` to `prefix` of `store` (the table URL `url`), manifest last.
/// A file a store cannot take in parts is read whole under a reservation of `memory`.
pub async fn upload_table(
    local: &Path,
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
    replace: bool,
    memory: &Arc<dyn MemoryPool>,
) -> Result<()> {
    let manifest = prefix.clone().join(MANIFEST_FILE);
    let replaced = table_exists(store, url, prefix).await?;
    if replaced {
        if !replace {
            return Err(failed(
                url,
                "a table already exists there; add OPTIONS ('ooode.replace' 'true') to replace it",
            ));
        }
        store
            .delete(&manifest)
            .await
            .map_err(|e| failed(url, format!("delete the old {MANIFEST_FILE}: {e}")))?;
    }
    let mut names: Vec<String> = std::fs::read_dir(local)
        .and_then(|dir| {
            dir.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .map_err(|e| {
            failed(
                url,
                format!("list the staged table {}: {e}", local.display()),
            )
        })?;
    // Local bookkeeping (the readers' pin file) stays local.
    names.retain(|n| !n.starts_with('.'));
    names.sort();
    if !names.iter().any(|n| n == MANIFEST_FILE) {
        return Err(failed(url, "the staged table has no manifest"));
    }
    let mut put = Vec::new();
    for name in names.iter().filter(|n| n.as_str() != MANIFEST_FILE) {
        let object = prefix.clone().join(name.as_str());
        if let Err(e) = put_file(store, &local.join(name), &object, memory).await {
            put.push(object);
            return Err(undo(store, url, &put, format!("upload {name}: {e}"), replaced).await);
        }
        put.push(object);
    }
    let bytes = std::fs::read(local.join(MANIFEST_FILE))
        .map_err(|e| failed(url, format!("read the staged manifest: {e}")))?;
    if let Err(e) = store.put(&manifest, PutPayload::from(bytes)).await {
        put.push(manifest);
        let why = format!("upload {MANIFEST_FILE}: {e}");
        return Err(undo(store, url, &put, why, replaced).await);
    }
    // Committed. Objects of a replaced table that the new one does not have are garbage now.
    let ours: std::collections::HashSet<ObjectPath> = names
        .iter()
        .map(|n| prefix.clone().join(n.as_str()))
        .collect();
    let listed: Vec<_> = store
        .list(Some(prefix))
        .try_collect()
        .await
        .unwrap_or_default();
    for meta in listed {
        let direct_child = meta
            .location
            .prefix_match(prefix)
            .is_some_and(|mut parts| parts.next().is_some() && parts.next().is_none());
        if direct_child
            && !ours.contains(&meta.location)
            && let Err(e) = store.delete(&meta.location).await
        {
            log::warn!(
                "ooode: {url}: could not delete old object {}: {e}",
                meta.location
            );
        }
    }
    Ok(())
}

/// Puts one file: one PUT when small, else a multipart upload (aborted on failure). A store
/// without multipart uploads (an HTTP server) gets the whole file in one PUT, its bytes held
/// under a reservation of `memory` (so a memory limit refuses it rather than being exceeded).
pub async fn put_file(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    object: &ObjectPath,
    memory: &Arc<dyn MemoryPool>,
) -> Result<()> {
    let io = |e: std::io::Error| DataFusionError::Execution(format!("{}: {e}", path.display()));
    let len = std::fs::metadata(path).map_err(io)?.len() as usize;
    if len <= PART_BYTES {
        let bytes = tokio::fs::read(path).await.map_err(io)?;
        store.put(object, PutPayload::from(bytes)).await?;
        return Ok(());
    }
    let upload = match store.put_multipart(object).await {
        Ok(upload) => upload,
        Err(object_store::Error::NotImplemented { .. }) => {
            let reservation =
                MemoryConsumer::new(format!("ooode upload of {object}")).register(memory);
            reservation.try_grow(len)?;
            let bytes = tokio::fs::read(path).await.map_err(io)?;
            store.put(object, PutPayload::from(bytes)).await?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut file = tokio::fs::File::open(path).await.map_err(io)?;
    let mut buf = vec![0u8; PART_BYTES];
    let result: Result<()> = async {
        loop {
            let n = read_full(&mut file, &mut buf).await.map_err(io)?;
            if n == 0 {
                return Ok(());
            }
            writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            writer.write(&buf[..n]);
        }
    }
    .await;
    match result {
        Ok(()) => {
            writer.finish().await?;
            Ok(())
        }
        Err(e) => {
            let _ = writer.abort().await;
            Err(e)
        }
    }
}

/// Reads until `buf` is full or the file ends.
async fn read_full(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]).await? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Deletes the objects a failed upload put; the error says what happened and what is left.
async fn undo(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    put: &[ObjectPath],
    why: String,
    replaced: bool,
) -> DataFusionError {
    let mut left = Vec::new();
    for object in put {
        match store.delete(object).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(_) => left.push(object.to_string()),
        }
    }
    let left = if left.is_empty() {
        "nothing was left behind (no manifest was written)".to_string()
    } else {
        format!(
            "no manifest was written, but these objects could not be deleted: {}",
            left.join(", ")
        )
    };
    let old = if replaced {
        "; the table it was replacing had been removed first (its manifest is gone)"
    } else {
        ""
    };
    failed(url, format!("{why}; {left}{old}"))
}
