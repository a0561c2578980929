#pragma once
// model.layers (models/sequential_spec.h): a list of layers, each a string ("conv2d(32, 3,
// padding=1)") or a mapping `residual: [...]` of its own layers. Its own reader and writer, as it
// nests.
#include <yaml-cpp/yaml.h>

#include <vector>

#include "experiments/lib/config_section.h"
#include "models/sequential_spec.h"

namespace packrat::config {

// Rewrites the YAML's model.layers so that each item is one layer: in a flow list
// ([conv2d(32, 3, padding=1), relu]) YAML splits a layer at the commas between its arguments, and
// the pieces are joined again (keeping the first one's line). Run before --set is applied, so that
// --set model.layers[4].residual[2]=... addresses the layer.
void join_split_layers(YAML::Node root);
// Reads model.layers from the model section (absent: empty). Each layer's `where` names the file,
// its path (model.layers[4].residual[2]) and line, for the model's shape messages; a malformed
// layer is an error there.
std::vector<LayerSpec> parse_layers(Section& model);
// The layers as parse_layers reads them back: a block list of canonical texts (layer_text) and
// residual mappings.
void emit_layers(YAML::Emitter& e, const std::vector<LayerSpec>& layers);

}  // namespace packrat::config
