//! The engine's image store: pulls within the image size limit (`[images] max_image_mib`), the
//! images refused for their size or environment removed, and the store within its budget
//! (`[images] max_store_mib`).
//!
//! Every image a lease asks for is marked with a tag of the agent's own when the lease's pull
//! finds it in the store: `gpu-market-agent/<scope>:<digest>.<unix seconds>`, moved to the
//! latest use each time. The tag is the agent's record of which images are its own and when
//! each was last used; it lives in the engine, so it survives the agent's restarts. While the
//! store holds more than its budget, the images the agent marked that no container uses (of
//! any state), that the machine does not advertise as cached, and that no lease asked for
//! within a grace (leases being readied have pulled theirs and not made a container yet) are
//! removed, least recently used first. Images the agent never pulled are never touched.
//!
//! The store's size is the sum of its images' sizes, which counts a layer shared by several
//! images once per image: more than the disk holds, so the collection errs towards removing.

use std::collections::{BTreeSet, HashMap};

use bollard::auth::DockerCredentials;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    CreateImageOptions, ListContainersOptions, ListImagesOptions, RemoveImageOptions,
    TagImageOptions,
};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::docker::DockerEngine;
use crate::runtime::{
    self, pinned_reference, registry_host, split_reference, Credentials, RuntimeError,
};

/// An image of the store, as the collection sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub id: String,
    pub bytes: u64,
    /// When the agent last marked it used (unix seconds); `None`: not the agent's.
    pub last_used: Option<u64>,
    /// The digests it is stored under (`repo@sha256:…`).
    pub digests: Vec<[u8; 32]>,
}

/// What to remove from `store` so that it holds at most `max_bytes`: images marked by the
/// agent, used by no container (`in_use`: image ids), none of whose digests `keep` names, last
/// used at or before `before` (unix seconds), least recently used first, until the rest fits.
pub fn to_remove(
    store: &[Stored],
    in_use: &BTreeSet<String>,
    keep: &[[u8; 32]],
    max_bytes: u64,
    before: u64,
) -> Vec<String> {
    let mut total: u64 = store.iter().map(|s| s.bytes).sum();
    let mut candidates: Vec<&Stored> = store
        .iter()
        .filter(|s| s.last_used.is_some_and(|t| t <= before))
        .filter(|s| !in_use.contains(&s.id))
        .filter(|s| !s.digests.iter().any(|d| keep.contains(d)))
        .collect();
    candidates.sort_by_key(|s| (s.last_used, s.id.clone()));
    let mut out = Vec::new();
    for c in candidates {
        if total <= max_bytes {
            break;
        }
        total = total.saturating_sub(c.bytes);
        out.push(c.id.clone());
    }
    out
}

/// The `sha256:` digests in an image's `repo@sha256:…` references.
fn digests_of(repo_digests: &[String]) -> Vec<[u8; 32]> {
    repo_digests
        .iter()
        .filter_map(|r| r.rsplit_once("@sha256:"))
        .filter_map(|(_, h)| {
            let mut digest = [0; 32];
            hex::decode_to_slice(h, &mut digest).ok().map(|()| digest)
        })
        .collect()
}

impl DockerEngine {
    /// Pulls `image` (by tag or digest), returning the number of progress messages seen.
    pub async fn pull(&self, image: &str) -> Result<usize, RuntimeError> {
        self.pull_with_credentials(image, None, u64::MAX).await
    }

    /// Pulls `image`, authenticating to its registry with `credentials` when given; gives up
    /// (dropping the request, which cancels the pull) once its layers add up to more than
    /// `max_bytes`. Returns the number of progress messages.
    pub async fn pull_with_credentials(
        &self,
        image: &str,
        credentials: Option<&Credentials>,
        max_bytes: u64,
    ) -> Result<usize, RuntimeError> {
        let (repo, reference) = split_reference(image)?;
        let options = CreateImageOptions {
            from_image: Some(repo.to_string()),
            tag: Some(reference.to_string()),
            ..Default::default()
        };
        let credentials = credentials.map(|c| DockerCredentials {
            username: Some(c.username.clone()),
            password: Some(c.password.clone()),
            serveraddress: Some(registry_host(image).to_string()),
            ..Default::default()
        });
        let mut stream = self.docker.create_image(Some(options), None, credentials);
        let mut layers: HashMap<String, u64> = HashMap::new();
        let mut messages = 0;
        while let Some(info) = stream.next().await {
            let info = info.map_err(|source| RuntimeError::Pull {
                image: image.to_string(),
                source,
            })?;
            messages += 1;
            let total = info.progress_detail.and_then(|p| p.total).unwrap_or(0);
            if let (Some(id), true) = (info.id, total > 0) {
                layers.insert(id, total.max(0) as u64);
                let bytes: u64 = layers.values().sum();
                if bytes > max_bytes {
                    return Err(RuntimeError::ImageTooLarge {
                        image: image.to_string(),
                        bytes,
                        max_bytes,
                    });
                }
            }
        }
        // Layers already in the store report no sizes while pulling, and none reports its
        // unpacked size: the image as stored answers for them, and for its environment.
        self.stored_fit(image, max_bytes)
            .await?
            .map_err(|source| RuntimeError::Pull {
                image: image.to_string(),
                source,
            })?;
        Ok(messages)
    }

    /// Whether `image` is in the store (the engine's error when not), refusing one bigger than
    /// `max_bytes` unpacked or whose own environment sets a key `env::forbidden_in_image`
    /// names; a refused image is removed from the store.
    pub(crate) async fn stored_fit(
        &self,
        image: &str,
        max_bytes: u64,
    ) -> Result<Result<(), BollardError>, RuntimeError> {
        let stored = match self.docker.inspect_image(image).await {
            Ok(stored) => stored,
            Err(e) => return Ok(Err(e)),
        };
        let bytes = stored.size.unwrap_or(0).max(0) as u64;
        let forbidden = stored
            .config
            .and_then(|c| c.env)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
            .find(|k| crate::env::forbidden_in_image(k));
        let refusal = if bytes > max_bytes {
            RuntimeError::ImageTooLarge {
                image: image.to_string(),
                bytes,
                max_bytes,
            }
        } else if let Some(key) = forbidden {
            RuntimeError::ImageEnv {
                image: image.to_string(),
                key,
            }
        } else {
            return Ok(Ok(()));
        };
        // Not kept to fill the disk; one a container still uses stays (the engine refuses).
        if let Err(e) = self
            .docker
            .remove_image(image, None::<RemoveImageOptions>, None)
            .await
        {
            tracing::warn!(image, error = %e, "a refused image could not be removed");
        }
        Err(refusal)
    }

    /// The repository of the agent's marks for this engine handle's scope.
    fn mark_repo(&self) -> String {
        let scope = Sha256::digest(self.scope().as_bytes());
        format!("gpu-market-agent/{}", &runtime::hex(&scope)[..16])
    }

    /// Marks `image_ref` pinned to `digest` used at `now`, replacing its older marks.
    pub(crate) async fn mark_used(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        now: u64,
    ) -> Result<(), RuntimeError> {
        let engine = |source| RuntimeError::Engine {
            op: "image tag",
            source,
        };
        let pinned = pinned_reference(image_ref, digest)?;
        let repo = self.mark_repo();
        let tag = format!("{}.{now}", runtime::hex(digest));
        let options = TagImageOptions {
            repo: Some(repo.clone()),
            tag: Some(tag.clone()),
        };
        self.docker
            .tag_image(&pinned, Some(options))
            .await
            .map_err(engine)?;
        let inspect = self.docker.inspect_image(&pinned).await.map_err(engine)?;
        let older = inspect
            .repo_tags
            .unwrap_or_default()
            .into_iter()
            .filter(|t| {
                t.starts_with(&format!("{repo}:{}.", runtime::hex(digest)))
                    && !t.ends_with(&format!(":{tag}"))
            });
        for old in older {
            let options = RemoveImageOptions {
                noprune: true,
                ..Default::default()
            };
            self.docker
                .remove_image(&old, Some(options), None)
                .await
                .map_err(engine)?;
        }
        Ok(())
    }

    /// The ids of the images containers of any state use.
    pub(crate) async fn images_in_use(&self) -> Result<BTreeSet<String>, RuntimeError> {
        let options = ListContainersOptions {
            all: true,
            ..Default::default()
        };
        Ok(self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|source| RuntimeError::Engine { op: "list", source })?
            .into_iter()
            .filter_map(|c| c.image_id)
            .collect())
    }

    /// Removes the image `id`, whatever its references.
    pub(crate) async fn remove_image_id(&self, id: &str) -> Result<(), RuntimeError> {
        let options = RemoveImageOptions {
            force: true,
            ..Default::default()
        };
        self.docker
            .remove_image(id, Some(options), None)
            .await
            .map(drop)
            .map_err(|source| RuntimeError::Engine {
                op: "image remove",
                source,
            })
    }

    /// The store as the collection sees it.
    pub(crate) async fn stored(&self) -> Result<Vec<Stored>, RuntimeError> {
        let images = self
            .docker
            .list_images(None::<ListImagesOptions>)
            .await
            .map_err(|source| RuntimeError::Engine {
                op: "image list",
                source,
            })?;
        let mark = format!("{}:", self.mark_repo());
        Ok(images
            .into_iter()
            .map(|i| Stored {
                last_used: i
                    .repo_tags
                    .iter()
                    .filter_map(|t| t.strip_prefix(&mark)?.rsplit_once('.')?.1.parse().ok())
                    .max(),
                digests: digests_of(&i.repo_digests),
                bytes: i.size.max(0) as u64,
                id: i.id,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str, mib: u64, last_used: Option<u64>, digest: u8) -> Stored {
        Stored {
            id: id.into(),
            bytes: mib << 20,
            last_used,
            digests: vec![[digest; 32]],
        }
    }

    #[test]
    fn the_least_recently_used_of_the_agents_unused_images_go_first_until_the_rest_fits() {
        let store = [
            image("theirs", 100, None, 1),
            image("running", 100, Some(10), 2),
            image("cached", 100, Some(20), 3),
            image("old", 100, Some(30), 4),
            image("older", 100, Some(25), 5),
            image("recent", 100, Some(95), 6),
        ];
        let in_use = BTreeSet::from(["running".to_string()]);
        let keep = [[3; 32]];
        // 600 MiB stored, 350 allowed: the two oldest candidates go, in that order.
        let out = to_remove(&store, &in_use, &keep, 350 << 20, 90);
        assert_eq!(out, vec!["older".to_string(), "old".to_string()]);
        // Within budget: nothing.
        assert!(to_remove(&store, &in_use, &keep, 600 << 20, 90).is_empty());
        // However far over, never another's image, a running one, a cached one, a recent one.
        let out = to_remove(&store, &in_use, &keep, 0, 90);
        assert_eq!(out, vec!["older".to_string(), "old".to_string()]);
    }

    #[test]
    fn digests_are_read_from_pinned_references() {
        let d = format!("reg/x@sha256:{}", "ab".repeat(32));
        assert_eq!(
            digests_of(&[d, "reg/y@sha256:zz".into(), "reg/z:tag".into()]),
            vec![[0xab; 32]]
        );
    }
}
