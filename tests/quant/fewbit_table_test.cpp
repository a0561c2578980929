#include "quant/fewbit/fewbit_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "autograd/pointwise.h"
#include "core/error.h"
#include "core/philox.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

// The committed tables are what the solver makes today, to the precision it guarantees on any
// build (the whole set solves in about a second).
TEST(FewBitTables, ShippedTablesMatchARegeneration) {
  const auto& shipped = shipped_fewbit_tables();
  size_t k = 0, continuous = 0;
  for (const auto& f : fewbit_functions()) {
    if (f.step) continue;
    ++continuous;
    const auto fresh = solve_builtin_tables(f.name, {1, 2, 3, 4});
    for (const auto& t : fresh) {
      ASSERT_LT(k, shipped.size()) << "fewbit_tables_data.cpp lacks " << t.fn << " " << t.bits << "-bit";
      std::string why;
      EXPECT_TRUE(fewbit_tables_match(shipped[k], t, kFewbitTableReproducibility, &why))
          << why << "\nregenerate with: build/bin/fewbit generate --out quant/fewbit/fewbit_tables_data.cpp";
      ++k;
    }
  }
  EXPECT_EQ(shipped.size(), continuous * 4);
}

TEST(FewBitTables, ShippedTablesAreWellFormed) {
  for (const auto& t : shipped_fewbit_tables()) {
    ASSERT_EQ(t.levels.size(), size_t{1} << t.bits) << t.fn;
    ASSERT_EQ(t.borders.size() + 1, t.levels.size()) << t.fn;
    for (size_t i = 1; i < t.borders.size(); ++i) EXPECT_LT(t.borders[i - 1], t.borders[i]) << t.fn;
    EXPECT_GE(t.max_abs_error * t.max_abs_error * 20, t.error) << t.fn;  // mean square <= sup^2
  }
}

// The branch-free lookup picks the same interval as the table's own definition.
TEST(FewBitTables, LookupMatchesTheTable) {
  PhiloxStream s(3, 0);
  for (const char* fn : {"gelu", "sigmoid", "selu"})
    for (int b = 1; b <= 4; ++b) {
      const FewbitTable& t = fewbit_table(fn, b);
      const FewbitLut lut = t.lut();
      for (int i = 0; i < 2000; ++i) {
        const float x = -12.0f + 24.0f * s.uniform();
        const uint32_t idx = fewbit_index(lut, x);
        ASSERT_LT(idx, 1u << b);
        EXPECT_EQ(idx, (fewbit_index<(1 << 4) - 1>(lut, x)));
        EXPECT_FLOAT_EQ(lut.levels[idx], static_cast<float>(t(x))) << fn << " " << b << " at " << x;
      }
      // Each interval is reached: just above each border lies the next interval.
      const float v0 = t.symmetric ? 0.0f : -11.0f;
      EXPECT_EQ(fewbit_index(lut, v0), 0u);
      for (size_t j = 0; j < t.borders.size(); ++j)
        EXPECT_EQ(fewbit_index(lut, std::nextafter(static_cast<float>(t.borders[j]), 100.0f)), j + 1);
    }
}

TEST(FewBitTables, StepDerivativesAreExactOneBit) {
  for (const char* fn : {"relu", "leaky_relu", "relu6"})
    for (int b = 1; b <= 4; ++b) {
      const FewbitTable& t = fewbit_table(fn, b);
      EXPECT_TRUE(t.exact);
      EXPECT_EQ(t.bits, 1);
      EXPECT_EQ(t.error, 0.0);
      EXPECT_THROW(t.lut(), Error);
    }
  EXPECT_EQ(fewbit_table("leaky_relu", 1).levels, (std::vector<double>{0.01, 1.0}));
  EXPECT_EQ(fewbit_table("relu6", 1).levels, (std::vector<double>{0.0, 1.0, 0.0}));
}

// A function that is not built in, given as f and f' at run time.
float softsign_f(float x) { return x / (1 + std::fabs(x)); }
float softsign_df(float x) { return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x))); }

TEST(FewBitTables, RuntimeFunctionIsSolvedAndCached) {
  Pointwise softsign{};
  softsign.name = "softsign_test";
  softsign.f = softsign_f;
  softsign.df = softsign_df;
  softsign.even_derivative = true;
  double prev = INFINITY;
  for (int b = 1; b <= 4; ++b) {
    const FewbitTable& t = fewbit_table(softsign, b);
    EXPECT_TRUE(t.symmetric);
    EXPECT_LT(t.error, prev);
    prev = t.error;
    EXPECT_EQ(&t, &fewbit_table(softsign, b));
  }
  EXPECT_THROW(fewbit_table(softsign, 5), Error);
}

TEST(FewBitTables, JsonNamesEverything) {
  const std::string j = fewbit_table("gelu", 3).json();
  for (const char* key : {"\"fn\": \"gelu\"", "\"bits\": 3", "\"borders\": [", "\"levels\": [", "\"error\": "})
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
}


// `fewbit errors` integrates eq. 3 from the table itself: for every shipped table it agrees with
// the error the solver stored, exact step tables have none, and a table whose levels are moved
// gets a larger error (so it is computed, not read back).
TEST(FewBitTables, ErrorIsIntegratedFromTheTable) {
  for (const auto& f : fewbit_functions())
    for (int b = 1; b <= 4; ++b) {
      const FewbitTable& t = fewbit_table(f.name, b);
      const double e = fewbit_table_error(t, f.df);
      if (t.exact) {
        EXPECT_EQ(e, 0.0) << f.name;
        continue;
      }
      EXPECT_NEAR(e, t.error, 1e-9 * std::max(1.0, t.error)) << f.name << " " << b << "-bit";
      FewbitTable moved = t;
      moved.levels[0] += 0.01;
      moved.error = t.error;  // the stored number is not what is reported
      // Interval 0 has weight w0 = its length (uniform weight): the error grows by w0 * 0.01^2.
      EXPECT_GT(fewbit_table_error(moved, f.df), t.error + 1e-5 * 0.9 * 1e-2) << f.name << " " << b << "-bit";
    }
}

// [-1e308, 1e308] ran for minutes and [-inf, inf] printed NaN borders as a success.
TEST(FewBitTables, WeightIntervalMustBeFiniteAndBounded) {
  const double inf = std::numeric_limits<double>::infinity();
  for (auto [a, b] : {std::pair{-inf, inf}, std::pair{-1e308, 1e308}, std::pair{-10.0, 101.0},
                      std::pair{std::nan(""), 1.0}}) {
    FewbitTableOptions o;
    o.A = a;
    o.B = b;
    try {
      fewbit_table("gelu", 2, o);
      FAIL() << "no error for [" << a << ", " << b << "]";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("must be finite and within [-100, 100]"), std::string::npos) << e.what();
    }
  }
  // So narrow that the borders coincided ([-100, -100, -100]).
  FewbitTableOptions narrow;
  narrow.A = -100;
  narrow.B = -99.9999999999999;
  EXPECT_NE(testing::message_of([&] { fewbit_table("gelu", 2, narrow); }).find("is narrower than 0.001"), std::string::npos);
}

}  // namespace
}  // namespace packrat
