// Package pull downloads GGUF model files into a local cache keyed by their sha256
// digest: `lmlite pull` and the `pull:` models of a configuration.
//
// A reference is one of
//
//	hf://ORG/REPO/PATH/FILE.gguf        a file of a Hugging Face repository ("main")
//	hf://ORG/REPO@REVISION/FILE.gguf    … at a branch, tag or commit
//	https://HOST/…/FILE.gguf            any HTTP(S) server
//	NAME                                a model of the catalogue (catalogue.yaml)
//
// hf:// resolves to Endpoint + /ORG/REPO/resolve/REVISION/PATH as huggingface_hub
// does (Endpoint defaults to $HF_ENDPOINT, else https://huggingface.co, so tests and
// mirrors redirect it). The hub answers a HEAD of that URL with the file's LFS sha256
// in X-Linked-Etag and its size in X-Linked-Size before redirecting to its CDN; Pull
// verifies the download against that digest (or the catalogue's), and says when a
// server gave none to verify against. The token (HF_TOKEN) is sent to the hub only,
// and Go's client drops it on a redirect to another host; it never appears in
// errors or notices.
//
// # The cache
//
//	DIR/blobs/sha256-HEX.gguf   verified files, named by digest (never partial)
//	DIR/refs/KEY.json           what a reference resolved to (KEY: hash of its URL)
//	DIR/partial/KEY.part        a download in progress, and KEY.part.json its origin
//	DIR/locks/KEY.lock          held (flock) by the process downloading KEY
//
// A reference found in refs/ with its blob is answered from the cache without any
// network access (so Offline works for everything pulled before). A second process
// pulling the same reference waits on the lock and then finds the blob.
//
// # Failures
//
// A dropped connection resumes with an HTTP Range request from the byte reached,
// never from the start (the partial file also survives the process); Retries
// consecutive attempts that make no progress give up. A server that announces
// inconsistent sizes, answers a range it was not asked for, or delivers bytes whose
// digest is wrong fails with an error that says which; a file whose digest is wrong
// is deleted, never kept.
package pull
