#pragma once
// The store policy written in a config's `saved_tensors` section: a default scheme plus ordered
// rules matched on the op kind and layer-name glob patterns; the first matching rule wins.
//
//   saved_tensors:
//     default: {scheme: actnn, bits: 4}
//     rules:
//       - {ops: [gelu], scheme: fewbit, bits: 3}
//       - {layers: ["layer1.*"], scheme: fp32}
//
// Each rule gets its own store instance. A request the matched store does not accept()
// (e.g. a conv input sent to the few-bit store) goes to the default store, and one the default
// does not accept either goes to a plain FP32 store, so every request is served.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/offload/offloading_store.h"
#include "autograd/saved_tensor_store.h"
#include "core/glob.h"  // glob_match, which rules use
#include "quant/policy/scheme_options.h"

namespace packrat {

struct SchemeSpec {
  std::string scheme = "fp32";
  std::map<std::string, std::string> options;  // every other key of the rule, as written
  std::string where = "saved_tensors.default";  // for error messages, e.g. "saved_tensors.rules[1] (line 14)"
};

struct StoreRule {
  std::vector<std::string> ops;     // op kinds ("conv2d", "gelu"); empty: any op
  std::vector<std::string> layers;  // glob patterns on the layer name ("layer1.*"); empty: any layer
  SchemeSpec spec;
};

struct StorePolicySpec {
  SchemeSpec default_scheme;
  std::vector<StoreRule> rules;
  // The run seed: schemes with stochastic rounding get it as their `seed` option unless the
  // config sets one.
  uint64_t seed = 0;
};

// The op kinds a rule's `ops` may name: the ops that save tensors for backward (SaveRequest::op,
// each registered in its op's file: autograd/saving_op_kinds.h) and every built-in activation by
// name.
std::vector<std::string> saving_op_kinds();  // attention_dropout, attention_k, ..., conv2d, ...
bool is_op_kind(std::string_view op);


// Scheme factories by name. The built-in schemes and the ActNN/GACT presets (quant/policy/presets.h)
// are registered on first use; a scheme of your own is registered by your program's main with
// register_scheme before it hands over to the trainer (experiments/lib/trainer_main.h; see
// examples/my_scheme/).
// A factory reads its options with the SchemeOptions getters; unread options are an error.
using StoreFactory = std::function<std::unique_ptr<SavedTensorStore>(SchemeOptions&)>;
// seeded: the factory reads a `seed` option, which make_store fills with the run seed.
void register_scheme(const std::string& name, StoreFactory factory, bool seeded = false);
std::vector<std::string> available_schemes();  // sorted
// Builds one store; throws naming spec.where for an unknown scheme or a bad/unknown option.
std::unique_ptr<SavedTensorStore> make_store(const SchemeSpec& spec, uint64_t seed = 0);

// Throws when one of a rule's `layers` patterns matches none of `layer_names` (the model's layers,
// Module::module_names): a typo would silently leave that rule's tensors to the default scheme.
// The message names the rule (its `where`), the pattern, `model` and a few of the layer names.
void check_rule_layers(const StorePolicySpec& spec, const std::vector<std::string>& layer_names, const std::string& model);

class RulePolicy : public StorePolicy {
 public:
  // With an offload rule, every store is handed out with the offload layer under it
  // (OffloadingStore); stores() still lists the stores themselves.
  explicit RulePolicy(const StorePolicySpec& spec, const std::optional<OffloadRule>& offload = std::nullopt);
  SavedTensorStore& store_for(const SaveRequest& r) override;
  std::vector<SavedTensorStore*> stores() override;
  Offloader* offloader() override { return offloader_.get(); }
  ~RulePolicy() override;

  // Index of the first rule matching the request (by op and layer only), or -1.
  int match(const SaveRequest& r) const;
  const StorePolicySpec& spec() const { return spec_; }

 private:
  SavedTensorStore& chosen_store(const SaveRequest& r);  // by the rules, without the offload layer
  StorePolicySpec spec_;
  std::unique_ptr<SavedTensorStore> default_;
  std::vector<std::unique_ptr<SavedTensorStore>> rule_stores_;
  std::unique_ptr<SavedTensorStore> last_resort_;  // FP32, for requests the default refuses
  std::unique_ptr<Offloader> offloader_;
  std::map<const SavedTensorStore*, std::unique_ptr<OffloadingStore>> offloading_;  // by the store each wraps
};

}  // namespace packrat
