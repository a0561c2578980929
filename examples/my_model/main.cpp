// Models of your own: the program registers them, then runs packrat's trainer, so they get
// everything build/bin/trainer gives (run directory, metrics, checkpoints, --resume, --set,
// the memory report, --benchmark, recomputation) and a config says `model.arch: small_cnn`:
//
//   build/bin/my_model --config configs/quickstart.yaml --set model.arch=small_cnn --set 'model.stem=""' --set output.dir=runs/small_cnn
//
// The models: small_cnn.h (a CNN) and tiny_transformer.h (one Transformer block over patches).
// (Every folder under examples/ is built into build/bin/<folder> with the tests.)
#include "small_cnn.h"
#include "tiny_transformer.h"
#include "experiments/lib/trainer_main.h"  // run_trainer

int main(int argc, char** argv) {
  packrat::register_model("small_cnn", my_model::small_cnn_kind());  // before the trainer reads its config
  packrat::register_model("tiny_transformer", my_model::tiny_transformer_kind());
  return packrat::run_trainer(argc, argv);
}
