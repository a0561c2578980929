// A saved-tensor scheme of your own: "bf16" keeps every f32 activation an op saves for backward
// as bfloat16 (the upper 16 bits of the f32, rounded to nearest even: the f32's range, 8 bits of
// mantissa), half the FP32 bytes. The program registers the scheme, then runs packrat's trainer,
// so it takes every trainer flag and its configs may say `scheme: bf16`:
//
//   build/bin/my_scheme --config configs/quickstart.yaml --set 'saved_tensors.default={scheme: bf16}'
//
// (Every folder under examples/ is built into build/bin/<folder> with the tests.)
//
// The scheme itself, and how a codec derives from packrat's compressing store: bf16_store.h.
#include "examples/my_scheme/bf16_store.h"
#include "experiments/lib/trainer_main.h"  // run_trainer

int main(int argc, char** argv) {
  packrat::register_scheme("bf16", my_scheme::make_bf16_store);  // before the trainer reads its config
  return packrat::run_trainer(argc, argv);
}
