// Text-only stand-in for libmtmd (the prebuilt node-llama-cpp libraries carry no
// mtmd): llama-server calls these only with --mmproj, which these runs never give.
#include "mtmd.h"
#include "mtmd-helper.h"
#include <cstdlib>
#include <map>

static void no_mtmd() { std::abort(); }

extern "C" {
struct mtmd_context_params mtmd_context_params_default(void) { return mtmd_context_params{}; }
mtmd_context * mtmd_init_from_file(const char *, const struct llama_model *, const struct mtmd_context_params) { return nullptr; }
void mtmd_free(mtmd_context *) {}
struct mtmd_caps mtmd_get_cap_from_file(const char *) { return mtmd_caps{}; }
struct mtmd_helper_init_opt mtmd_helper_init_opt_default(void) { return mtmd_helper_init_opt{}; }
void mtmd_helper_log_set(ggml_log_callback, void *) {}
bool mtmd_helper_support_video(const mtmd_context *) { return false; }
bool mtmd_support_audio(const mtmd_context *) { return false; }
bool mtmd_support_vision(const mtmd_context *) { return false; }
int32_t mtmd_batch_add_chunk(mtmd_batch *, const mtmd_input_chunk *) { no_mtmd(); return 0; }
int32_t mtmd_batch_encode(mtmd_batch *) { no_mtmd(); return 0; }
float * mtmd_batch_get_output_embd(mtmd_batch *, const mtmd_input_chunk *) { no_mtmd(); return nullptr; }
mtmd_batch * mtmd_batch_init(mtmd_context *) { no_mtmd(); return nullptr; }
void mtmd_batch_free(mtmd_batch *) {}
mtmd_input_chunk * mtmd_input_chunk_copy(const mtmd_input_chunk *) { no_mtmd(); return nullptr; }
void mtmd_input_chunk_free(mtmd_input_chunk *) {}
const char * mtmd_input_chunk_get_id(const mtmd_input_chunk *) { no_mtmd(); return nullptr; }
llama_pos mtmd_input_chunk_get_n_pos(const mtmd_input_chunk *) { no_mtmd(); return 0; }
size_t mtmd_input_chunk_get_n_tokens(const mtmd_input_chunk *) { no_mtmd(); return 0; }
mtmd_input_chunk * mtmd_input_chunk_get_placeholder(const mtmd_input_chunk *) { no_mtmd(); return nullptr; }
const llama_token * mtmd_input_chunk_get_tokens_text(const mtmd_input_chunk *, size_t *) { no_mtmd(); return nullptr; }
enum mtmd_input_chunk_type mtmd_input_chunk_get_type(const mtmd_input_chunk *) { no_mtmd(); return MTMD_INPUT_CHUNK_TYPE_TEXT; }
mtmd_input_chunk * mtmd_input_chunk_load(const char *, size_t) { no_mtmd(); return nullptr; }
int32_t mtmd_input_chunk_save(const mtmd_input_chunk *, char *, size_t, size_t *) { no_mtmd(); return 0; }
mtmd_input_chunks * mtmd_input_chunks_init(void) { no_mtmd(); return nullptr; }
size_t mtmd_input_chunks_size(const mtmd_input_chunks *) { no_mtmd(); return 0; }
const mtmd_input_chunk * mtmd_input_chunks_get(const mtmd_input_chunks *, size_t) { no_mtmd(); return nullptr; }
void mtmd_input_chunks_free(mtmd_input_chunks *) {}
int32_t mtmd_tokenize(const mtmd_context *, mtmd_input_chunks *, const mtmd_input_text *, const mtmd_bitmap * const *, size_t) { no_mtmd(); return 0; }
void mtmd_bitmap_free(mtmd_bitmap *) {}
}
extern "C" {
struct mtmd_helper_bitmap_wrapper mtmd_helper_bitmap_init_from_buf(const mtmd_context *, const unsigned char *, size_t, bool, struct mtmd_helper_init_opt) { no_mtmd(); return mtmd_helper_bitmap_wrapper{}; }
int32_t mtmd_helper_decode_image_chunk(mtmd_context *, struct llama_context *, const mtmd_input_chunk *, float *, llama_pos, llama_seq_id, int32_t, llama_pos *, mtmd_helper_post_decode_callback, void *) { no_mtmd(); return 1; }
}
std::map<ggml_backend_dev_t, size_t> mtmd_get_memory_usage(const char *, struct mtmd_context_params) { return {}; }
extern "C" void mtmd_helper_video_free(mtmd_helper_video *) {}
