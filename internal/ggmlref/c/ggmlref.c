// ggmlref: llama.cpp's own quantizers, decoders and CPU dot products on rows the
// Go tests give it, through the prebuilt libggml-base and libggml-cpu of the npm
// package (../shared/peers/llamacpp). Built and run by internal/ggmlref (for the kernels and model tests).
//
// usage: ggmlref TYPE ROWS COLS [raw] < in > out
// in:  ROWS*COLS float32 weights (raw: ROWS rows of TYPE's blocks, used as they
//      are), then COLS float32 activations
// out: the weights quantized to TYPE by ggml_quantize_chunk (an all-ones importance
//      matrix where the type requires one), ROWS*COLS float32 as ggml decodes them,
//      ROWS float32 dot products of each row with the activations as the CPU
//      backend computes them (activations converted to the type's vec_dot_type).
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"
#include "ggml-cpu.h"

static void must_read(void *p, size_t n) {
  if (fread(p, 1, n, stdin) != n) { fprintf(stderr, "ggmlref: short input\n"); exit(1); }
}

int main(int argc, char **argv) {
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
    ggml_quantize_init(type);
    ggml_quantize_chunk(type, w, q, 0, rows, cols, imatrix);
  }
  for (int64_t r = 0; r < rows; r++) tt->to_float((char *)q + r * rb, deq + r * cols, cols);
  vt->from_float(x, xq, cols);
  for (int64_t r = 0; r < rows; r++) ct->vec_dot(cols, &dots[r], 0, (char *)q + r * rb, 0, xq, 0, 1);
  fwrite(q, 1, rb * rows, stdout);
  fwrite(deq, sizeof(float), rows * cols, stdout);
  fwrite(dots, sizeof(float), rows, stdout);
  fwrite(xq, 1, vb, stdout);
  return 0;
}
