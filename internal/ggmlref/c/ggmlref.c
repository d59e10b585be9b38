// ggmlref: llama.cpp's own quantizers, decoders and CPU dot products on rows the
// Go tests give it, through the prebuilt libggml-base and libggml-cpu of the npm
// package (../shared/peers/llamacpp). Built and run by internal/ggmlref (for the kernels and model tests).
//
// usage: ggmlref TYPE ROWS COLS [raw] < in > out
//        ggmlref swiglu N < in > out
//        ggmlref attend HD N SCALE < in > out
//        ggmlref lora WTYPE ATYPE BTYPE IN OUT RANK NTOK SCALE < in > out
//        ggmlref rope HD NHEADS NTOK NDIMS MODE BASE FREQSCALE < in > out
//        ggmlref matmul TYPE ROWS COLS NTOK REPACK < in > out
// in:  ROWS*COLS float32 weights (raw: ROWS rows of TYPE's blocks, used as they
//      are), then COLS float32 activations
// out: the weights quantized to TYPE by ggml_quantize_chunk (F32: as they are; an all-ones importance
//      matrix where the type requires one), ROWS*COLS float32 as ggml decodes them,
//      ROWS float32 dot products of each row with the activations as the CPU
//      backend computes them (activations converted to the type's vec_dot_type).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-cpu.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

static void must_read(void *p, size_t n) {
  if (fread(p, 1, n, stdin) != n) { fprintf(stderr, "ggmlref: short input\n"); exit(1); }
}

// swiglu: in N float32 gate values then N up values; out the N values of ggml's
// SwiGLU op (ggml_swiglu_split, as llama.cpp's FFN calls it) on the CPU backend.
static int swiglu(int64_t n) {
  struct ggml_init_params ip = {.mem_size = 16 * 1024 * 1024 + 8 * n * sizeof(float), .mem_buffer = NULL, .no_alloc = false};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *g = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n), *u = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
  must_read(g->data, sizeof(float) * n);
  must_read(u->data, sizeof(float) * n);
  struct ggml_tensor *out = ggml_swiglu_split(ctx, g, u);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  if (ggml_graph_compute_with_ctx(ctx, gf, 1) != GGML_STATUS_SUCCESS) { fprintf(stderr, "ggmlref: compute failed\n"); return 1; }
  fwrite(out->data, sizeof(float), n, stdout);
  ggml_free(ctx);
  return 0;
}

// attend: in HD float32 query values, then N keys and N values of HD binary16
// each; out the HD float32 values of ggml's flash attention op
// (ggml_flash_attn_ext, one head, one query, no mask, as llama.cpp decodes over
// its F16 KV cache) on the CPU backend.
static int attend(int64_t hd, int64_t n, float scale) {
  struct ggml_init_params ip = {.mem_size = 16 * 1024 * 1024 + 8 * (n + 1) * hd * sizeof(float), .mem_buffer = NULL, .no_alloc = false};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, 1, 1);
  struct ggml_tensor *k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, hd, n, 1, 1);
  struct ggml_tensor *v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, hd, n, 1, 1);
  must_read(q->data, sizeof(float) * hd);
  must_read(k->data, 2 * hd * n);
  must_read(v->data, 2 * hd * n);
  struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, NULL, scale, 0.0f, 0.0f);
  ggml_flash_attn_ext_set_prec(out, GGML_PREC_DEFAULT);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  if (ggml_graph_compute_with_ctx(ctx, gf, 1) != GGML_STATUS_SUCCESS) { fprintf(stderr, "ggmlref: compute failed\n"); return 1; }
  fwrite(out->data, sizeof(float), hd, stdout);
  ggml_free(ctx);
  return 0;
}

// lora: in the raw rows of W (OUT rows of IN values of type WTYPE), A (RANK rows
// of IN, ATYPE) and B (OUT rows of RANK, BTYPE), then NTOK rows of IN float32
// activations; out the NTOK*RANK float32 values of A*x, the NTOK*OUT of B*(A*x),
// the NTOK*OUT of W*x and the NTOK*OUT of the adapted projection,
// W*x + scale*B*(A*x), as llama.cpp's
// build_lora_mm (llama-graph.cpp) builds it on the CPU backend (one thread).
static int lora(enum ggml_type wt, enum ggml_type at, enum ggml_type bt, int64_t in, int64_t out, int64_t rank, int64_t ntok, float scale) {
  size_t wb = ggml_row_size(wt, in) * out, ab = ggml_row_size(at, in) * rank, bb = ggml_row_size(bt, rank) * out;
  struct ggml_init_params ip = {.mem_size = 64 * 1024 * 1024 + 4 * (wb + ab + bb) + 64 * ntok * (in + out + rank), .mem_buffer = NULL, .no_alloc = false};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *w = ggml_new_tensor_2d(ctx, wt, in, out), *a = ggml_new_tensor_2d(ctx, at, in, rank), *b = ggml_new_tensor_2d(ctx, bt, rank, out);
  struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, in, ntok);
  must_read(w->data, wb);
  must_read(a->data, ab);
  must_read(b->data, bb);
  must_read(x->data, sizeof(float) * in * ntok);
  struct ggml_tensor *wx = ggml_mul_mat(ctx, w, x);
  struct ggml_tensor *t = ggml_mul_mat(ctx, a, x);
  struct ggml_tensor *u = ggml_mul_mat(ctx, b, t);
  struct ggml_tensor *res = ggml_add(ctx, wx, ggml_scale(ctx, u, scale));
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, res);
  if (ggml_graph_compute_with_ctx(ctx, gf, 1) != GGML_STATUS_SUCCESS) { fprintf(stderr, "ggmlref: compute failed\n"); return 1; }
  fwrite(t->data, sizeof(float), rank * ntok, stdout);
  fwrite(u->data, sizeof(float), out * ntok, stdout);
  fwrite(wx->data, sizeof(float), out * ntok, stdout);
  fwrite(res->data, sizeof(float), out * ntok, stdout);
  ggml_free(ctx);
  return 0;
}

// rope: in NTOK int32 positions, then NTOK*NHEADS*HD float32 values (token by
// token, head by head); out the same values rotated by ggml's RoPE op
// (ggml_rope_ext, as llama.cpp's graphs call it with no YaRN: ext_factor 0,
// attn_factor 1) on the CPU backend, MODE 0 (normal) or 2 (neox).
static int rope(int64_t hd, int64_t nh, int64_t nt, int ndims, int mode, float base, float fscale) {
  struct ggml_init_params ip = {.mem_size = 16 * 1024 * 1024 + 8 * hd * nh * nt * sizeof(float), .mem_buffer = NULL, .no_alloc = false};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, nt);
  struct ggml_tensor *x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hd, nh, nt);
  must_read(pos->data, sizeof(int32_t) * nt);
  must_read(x->data, sizeof(float) * hd * nh * nt);
  struct ggml_tensor *out = ggml_rope_ext(ctx, x, pos, NULL, ndims, mode, 0, base, fscale, 0.0f, 1.0f, 32.0f, 1.0f);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  if (ggml_graph_compute_with_ctx(ctx, gf, 1) != GGML_STATUS_SUCCESS) { fprintf(stderr, "ggmlref: compute failed\n"); return 1; }
  fwrite(out->data, sizeof(float), hd * nh * nt, stdout);
  ggml_free(ctx);
  return 0;
}

// matmul: in ROWS rows of TYPE's blocks (COLS values each), then NTOK rows of COLS
// float32 activations; out the NTOK*ROWS float32 values of ggml_mul_mat (token by
// token) as llama.cpp's CPU backend computes them over a model's weights, one
// thread: REPACK 1 puts the weights in the CPU backend's extra buffer type
// (CPU_REPACK, as llama.cpp loads a model by default, use_extra_bufts), whose
// repacked gemv (one token) and gemm (groups of 4) kernels then take the product;
// REPACK 0 in a plain CPU buffer (vec_dot, or llamafile's sgemm for several tokens).
// Exits 3 when REPACK 1 and the extra buffer type takes no such tensor.
static int matmul(enum ggml_type type, int64_t rows, int64_t cols, int64_t ntok, int repack) {
  size_t wb = ggml_row_size(type, cols) * rows;
  ggml_backend_t be = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(be, 1);
  ggml_backend_buffer_type_t wbuft = ggml_backend_cpu_buffer_type();
  if (repack) {
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    typedef ggml_backend_buffer_type_t *(*extra_t)(ggml_backend_dev_t);
    extra_t f = (extra_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    wbuft = NULL;
    for (ggml_backend_buffer_type_t *b = f ? f(dev) : NULL; b && *b; b++) {
      if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) wbuft = *b;
    }
    if (!wbuft) { fprintf(stderr, "ggmlref: no CPU_REPACK buffer type\n"); return 3; }
  }
  struct ggml_init_params ip = {.mem_size = 4 * ggml_tensor_overhead() + ggml_graph_overhead(), .mem_buffer = NULL, .no_alloc = true};
  struct ggml_context *wctx = ggml_init(ip), *ctx = ggml_init(ip);
  struct ggml_tensor *w = ggml_new_tensor_2d(wctx, type, cols, rows);
  ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, wbuft);
  struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, ntok);
  struct ggml_tensor *out = ggml_mul_mat(ctx, w, x);
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
  if (!wbuf || !buf) { fprintf(stderr, "ggmlref: allocation failed\n"); return 1; }
  ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  if (repack && w->extra == NULL) { // no repacked layout for this type and shape: vec_dot would take it
    fprintf(stderr, "ggmlref: CPU_REPACK does not take this product\n");
    return 3;
  }
  void *q = malloc(wb);
  float *xs = malloc(sizeof(float) * cols * ntok), *res = malloc(sizeof(float) * rows * ntok);
  must_read(q, wb);
  must_read(xs, sizeof(float) * cols * ntok);
  ggml_backend_tensor_set(w, q, 0, wb);
  ggml_backend_tensor_set(x, xs, 0, sizeof(float) * cols * ntok);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) { fprintf(stderr, "ggmlref: compute failed\n"); return 1; }
  ggml_backend_tensor_get(out, res, 0, sizeof(float) * rows * ntok);
  fwrite(res, sizeof(float), rows * ntok, stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "swiglu") == 0) { ggml_cpu_init(); return swiglu(atoll(argv[2])); }
  if (argc == 10 && strcmp(argv[1], "lora") == 0) {
    ggml_cpu_init();
    return lora((enum ggml_type)atoi(argv[2]), (enum ggml_type)atoi(argv[3]), (enum ggml_type)atoi(argv[4]), atoll(argv[5]), atoll(argv[6]), atoll(argv[7]), atoll(argv[8]), (float)atof(argv[9]));
  }
  if (argc == 9 && strcmp(argv[1], "rope") == 0) {
    ggml_cpu_init();
    return rope(atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), atoi(argv[5]), atoi(argv[6]), (float)atof(argv[7]), (float)atof(argv[8]));
  }
  if (argc == 7 && strcmp(argv[1], "matmul") == 0) {
    ggml_cpu_init();
    return matmul((enum ggml_type)atoi(argv[2]), atoll(argv[3]), atoll(argv[4]), atoll(argv[5]), atoi(argv[6]));
  }
  if (argc == 5 && strcmp(argv[1], "attend") == 0) { ggml_cpu_init(); return attend(atoll(argv[2]), atoll(argv[3]), (float)atof(argv[4])); }
  if (argc != 4 && argc != 5) { fprintf(stderr, "usage: ggmlref TYPE ROWS COLS [raw]\n"); return 2; }
  int raw = argc == 5;
  enum ggml_type type = (enum ggml_type)atoi(argv[1]);
  int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
  ggml_cpu_init();
  const struct ggml_type_traits *tt = ggml_get_type_traits(type);
  const struct ggml_type_traits_cpu *ct = ggml_get_type_traits_cpu(type);
  const struct ggml_type_traits_cpu *vt = ggml_get_type_traits_cpu(ct->vec_dot_type);
  size_t rb = ggml_row_size(type, cols), vb = ggml_row_size(ct->vec_dot_type, cols);
  float *w = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * cols);
  float *imatrix = NULL, *deq = malloc(sizeof(float) * rows * cols), *dots = malloc(sizeof(float) * rows);
  void *q = malloc(rb * rows), *xq = malloc(vb);
  if (raw) {
    must_read(q, rb * rows);
    must_read(x, sizeof(float) * cols);
  } else {
    must_read(w, sizeof(float) * rows * cols);
    must_read(x, sizeof(float) * cols);
    if (ggml_quantize_requires_imatrix(type)) {
      imatrix = malloc(sizeof(float) * cols);
      for (int64_t i = 0; i < cols; i++) imatrix[i] = 1;
    }
    if (type != GGML_TYPE_F32) {
      ggml_quantize_init(type);
      ggml_quantize_chunk(type, w, q, 0, rows, cols, imatrix);
    }
  }
  if (type == GGML_TYPE_F32) { // no conversions (ggml has none for F32)
    if (!raw) memcpy(q, w, rb * rows);
    memcpy(deq, q, rb * rows);
    memcpy(xq, x, vb);
  } else {
    for (int64_t r = 0; r < rows; r++) tt->to_float((char *)q + r * rb, deq + r * cols, cols);
    vt->from_float(x, xq, cols);
  }
  for (int64_t r = 0; r < rows; r++) ct->vec_dot(cols, &dots[r], 0, (char *)q + r * rb, 0, xq, 0, 1);
  fwrite(q, 1, rb * rows, stdout);
  fwrite(deq, sizeof(float), rows * cols, stdout);
  fwrite(dots, sizeof(float), rows, stdout);
  fwrite(xq, 1, vb, stdout);
  return 0;
}
