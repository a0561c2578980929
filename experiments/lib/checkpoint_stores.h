#pragma once
// The state of the saved-tensor stores that adapt across steps (SavedTensorStore::state_name, e.g.
// GACT's bit allocation), in a checkpoint: per state name N, "N.stores" (how many, an i64 scalar)
// and "N.<i>.<entry>" for store i of that name (in the policy's order), its export_state().
#include <string>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "experiments/lib/safetensors.h"

namespace packrat {

void append_store_state(NamedTensors& all, const std::vector<SavedTensorStore*>& stores);
// Restores each store's state from the checkpoint at `path`. A checkpoint that holds the state of
// another number of stores of a name than `stores` has is an error naming both counts; one
// without any state of a name the stores have loads with a warning (the adaptive state then
// starts afresh, so the run does not continue bit-identically).
void restore_store_state(const SafetensorsFile& f, const std::vector<SavedTensorStore*>& stores,
                         const std::string& path);

}  // namespace packrat
