// Shape ops against reference index loops, float64 gradient checks, errors and SBP lists.

#include "oneflowlike/ops/shape_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "oneflowlike/eager.h"
#include "oneflowlike/kernels/cpu/strided_view.h"
#include "oneflowlike/kernels/cuda/transpose_tiles.h"
#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

// Multi-index of flat index i in a row-major shape.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.ndim());
  for (int a = shape.ndim() - 1; a >= 0; --a) {
    index[a] = i % shape[a];
    i /= shape[a];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t i = 0;
  for (int a = 0; a < shape.ndim(); ++a) i = i * shape[a] + index[a];
  return i;
}

std::vector<double> reference_transpose(const Tensor& x, const std::vector<int64_t>& perm,
                                        Shape* out_shape) {
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(x.shape()[static_cast<int>(p)]);
  *out_shape = Shape(dims);
  const std::vector<double> in = values_of(x);
  std::vector<double> out(in.size());
  for (int64_t o = 0; o < out_shape->numel(); ++o) {
    const std::vector<int64_t> oi = unravel(o, *out_shape);
    std::vector<int64_t> ii(oi.size());
    for (size_t j = 0; j < perm.size(); ++j) ii[perm[j]] = oi[j];
    out[o] = in[ravel(ii, x.shape())];
  }
  return out;
}

std::vector<double> reference_slice(const Tensor& x, const std::vector<int64_t>& start,
                                    const std::vector<int64_t>& stop,
                                    const std::vector<int64_t>& step, Shape* out_shape) {
  std::vector<int64_t> dims;
  for (int a = 0; a < x.ndim(); ++a) dims.push_back((stop[a] - start[a] + step[a] - 1) / step[a]);
  *out_shape = Shape(dims);
  const std::vector<double> in = values_of(x);
  std::vector<double> out(out_shape->numel());
  for (int64_t o = 0; o < out_shape->numel(); ++o) {
    std::vector<int64_t> index = unravel(o, *out_shape);
    for (int a = 0; a < x.ndim(); ++a) index[a] = start[a] + index[a] * step[a];
    out[o] = in[ravel(index, x.shape())];
  }
  return out;
}

using testing::expect_error;

std::vector<SbpSignature> signatures(const std::string& name, const AnyParams& params,
                                     const std::vector<TensorMeta>& inputs) {
  const OpSchema& op = OpRegistry::global().find(name);
  InferContext ctx(op, params, inputs);
  return (*op.get<FSbpSignatures>())(ctx);
}

std::vector<std::string> signature_strings(const std::vector<SbpSignature>& sigs) {
  std::vector<std::string> out;
  for (const SbpSignature& s : sigs) out.push_back(s.to_string());
  return out;
}

// ---- transpose ----

TEST(Transpose, MatchesReferenceForEveryPermutationOf3d) {
  const Tensor x = random_tensor({3, 4, 5}, DataType::kFloat32, 1);
  std::vector<int64_t> perm = {0, 1, 2};
  do {
    Shape shape;
    const std::vector<double> expected = reference_transpose(x, perm, &shape);
    expect_close(functional::transpose(x, perm), expected, shape);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(Transpose, LargeBatchedMatrixUsesBlockedPathCorrectly) {
  // (batch, rows, cols) with extents that are not multiples of the tile, and 4-d perms whose
  // stride-1 input axis lands in the middle of the output.
  const Tensor x = random_tensor({3, 70, 45}, DataType::kFloat64, 2);
  Shape shape;
  std::vector<double> expected = reference_transpose(x, {0, 2, 1}, &shape);
  expect_close(functional::transpose(x, {0, 2, 1}), expected, shape, 0, 0);

  const Tensor y = random_tensor({5, 6, 33, 40}, DataType::kFloat32, 3);
  for (const std::vector<int64_t>& perm :
       std::vector<std::vector<int64_t>>{{3, 1, 2, 0}, {1, 3, 0, 2}, {0, 2, 1, 3}, {2, 3, 0, 1}}) {
    expected = reference_transpose(y, perm, &shape);
    expect_close(functional::transpose(y, perm), expected, shape, 0, 0);
  }

  const Tensor big = random_tensor({300, 257}, DataType::kFloat32, 4);  // parallel over tiles
  expected = reference_transpose(big, {1, 0}, &shape);
  expect_close(functional::transpose(big, {1, 0}), expected, shape, 0, 0);
}

// The tiles of the CUDA transpose (kernels/cuda/transpose_tiles.h) walked on the CPU, with the
// kernel's bounds: every output element is written once, from the input element the reference
// gives it.
TEST(Transpose, CudaTileAddressingCoversEveryElementOnce) {
  using cuda_kernels::kTransposeTile;
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {Shape{5, 7}, {1, 0}},
      {Shape{33, 65}, {1, 0}},
      {Shape{70, 40}, {1, 0}},
      {Shape{2, 3, 40, 33}, {0, 1, 3, 2}},
      {Shape{4, 50, 3}, {0, 2, 1}},
      {Shape{2, 3, 4}, {2, 1, 0}},
      {Shape{2, 3, 4}, {1, 2, 0}},
      {Shape{2, 3, 4}, {2, 0, 1}},
      {Shape{3, 5, 4, 2}, {3, 1, 0, 2}},
      {Shape{2, 1, 3, 4, 5}, {4, 2, 1, 3, 0}}};
  for (const auto& [shape, perm] : cases) {
    SCOPED_TRACE(shape.to_string());
    const cpu::StridedView view = cpu::coalesce(cpu::transpose_view(shape, perm));
    const int last = static_cast<int>(view.dims.size()) - 1;
    int k = -1;
    for (int a = 0; a < last; ++a) {
      if (view.strides[a] == 1) k = a;
    }
    ASSERT_NE(view.strides[last], 1);  // the case takes the tiled path
    ASSERT_GE(k, 0);
    const cuda_kernels::TransposeTiles t = cuda_kernels::transpose_tiles(view, k);
    std::vector<double> read(shape.numel(), -1.0);  // the input index each output element reads
    for (int64_t w = 0; w < t.num_tiles; ++w) {
      const cuda_kernels::Tile at = cuda_kernels::tile_at(t, w);
      for (int64_t i = at.i0; i < std::min<int64_t>(at.i0 + kTransposeTile, t.rows); ++i) {
        for (int64_t j = at.j0; j < std::min<int64_t>(at.j0 + kTransposeTile, t.cols); ++j) {
          const int64_t o = at.out_base + i * t.out_row_stride + j;
          ASSERT_TRUE(o >= 0 && o < shape.numel());
          EXPECT_EQ(read[o], -1.0) << "output " << o << " written twice";
          read[o] = static_cast<double>(at.in_base + i + j * t.col_stride);
        }
      }
    }
    std::vector<double> index(shape.numel());
    std::iota(index.begin(), index.end(), 0.0);
    Shape out_shape;
    EXPECT_EQ(read,
              reference_transpose(make_tensor(index, shape, DataType::kFloat64), perm, &out_shape));
  }
}

TEST(Transpose, NegativeAxesAndIntegerDtypesWork) {
  const Tensor x = make_tensor({0, 1, 2, 3, 4, 5}, {2, 3}, DataType::kInt64);
  expect_close(functional::transpose(x, {-1, -2}), {0, 3, 1, 4, 2, 5}, {3, 2});
  const Tensor b = make_tensor({1, 0, 0, 1, 1, 0}, {3, 2}, DataType::kBool);
  expect_close(functional::transpose(b, {1, 0}), {1, 0, 1, 0, 1, 0}, {2, 3});
}

TEST(Transpose, IdentityAndEmptyAndScalarCopyValues) {
  const Tensor x = random_tensor({2, 3, 4}, DataType::kFloat32, 5);
  expect_close(functional::transpose(x, {0, 1, 2}), values_of(x), {2, 3, 4}, 0, 0);
  const Tensor e = Tensor::zeros({0, 3}, DataType::kFloat32);
  EXPECT_EQ(functional::transpose(e, {1, 0}).shape(), Shape({3, 0}));
  const Tensor s = Tensor::scalar(2.5, DataType::kFloat64);
  expect_close(functional::transpose(s, {}), {2.5}, Shape());
}

TEST(Transpose, GradientIsTransposeByInversePermutation) {
  const Tensor x = random_tensor({2, 3, 4}, DataType::kFloat64, 6);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::transpose(in[0], {2, 0, 1})};
      },
      {x});
}

TEST(Transpose, RejectsPermThatIsNotAPermutation) {
  const Tensor x = random_tensor({2, 3, 4}, DataType::kFloat32, 7);
  expect_error(
      [&] {
        functional::transpose(x, {0, 0, 1});
      },
      ErrorCode::kInvalidArgument, "perm must be a permutation");
  expect_error(
      [&] {
        functional::transpose(x, {0, 1});
      },
      ErrorCode::kInvalidArgument,
      "one entry per axis of x. However, got perm [0, 1] for x (2, 3, 4)");
  expect_error(
      [&] {
        functional::transpose(x, {0, 1, 3});
      },
      ErrorCode::kOutOfRange, "perm entries must be axes of x");
}

TEST(Transpose, SplitAxisFollowsThePermutation) {
  const auto sigs = signature_strings(
      signatures("transpose", TransposeParams{{2, 0, 1}}, {{Shape{2, 3, 4}, DataType::kFloat32}}));
  EXPECT_EQ(sigs, (std::vector<std::string>{"S(2) -> S(0)", "S(0) -> S(1)", "S(1) -> S(2)",
                                            "B -> B", "P -> P"}));
}

// ---- slice and slice_grad ----

TEST(Slice, StepsAndOffsetsMatchReference) {
  const Tensor x = random_tensor({5, 6, 7}, DataType::kFloat32, 8);
  const std::vector<std::vector<std::vector<int64_t>>> cases = {
      {{1, 0, 2}, {5, 6, 7}, {2, 1, 3}},
      {{0, 2, 0}, {5, 4, 7}, {1, 1, 1}},
      {{4, 1, 6}, {5, 6, 7}, {1, 4, 1}},
      {{2, 3, 3}, {2, 3, 3}, {1, 1, 1}},  // empty
  };
  for (const auto& c : cases) {
    Shape shape;
    const std::vector<double> expected = reference_slice(x, c[0], c[1], c[2], &shape);
    expect_close(functional::slice(x, c[0], c[1], c[2]), expected, shape, 0, 0);
  }
}

TEST(Slice, LargeSliceRunsInParallelAndMatches) {
  const Tensor x = random_tensor({400, 300}, DataType::kFloat64, 9);
  Shape shape;
  const std::vector<double> expected = reference_slice(x, {3, 5}, {398, 300}, {1, 2}, &shape);
  expect_close(functional::slice(x, {3, 5}, {398, 300}, {1, 2}), expected, shape, 0, 0);
}

TEST(Slice, GradientScattersIntoZeros) {
  const Tensor x = random_tensor({4, 5, 3}, DataType::kFloat64, 10);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::slice(in[0], {1, 0, 0}, {4, 5, 2}, {2, 2, 1})};
      },
      {x});
}

TEST(SliceGrad, WritesDyAtSlicedPositionsAndZerosElsewhere) {
  const Tensor dy = make_tensor({1, 2, 3, 4}, {2, 2}, DataType::kFloat32);
  const Tensor dx = functional::slice_grad(dy, {3, 4}, {0, 1}, {3, 4}, {2, 2});
  expect_close(dx, {0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4}, {3, 4}, 0, 0);
}

TEST(SliceGrad, GradientIsSlice) {
  const Tensor dy = random_tensor({2, 3}, DataType::kFloat64, 11);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::slice_grad(in[0], {5, 3}, {1, 0}, {5, 3}, {2, 1})};
      },
      {dy});
}

TEST(Slice, RejectsBadBoundsAndSteps) {
  const Tensor x = random_tensor({4, 5}, DataType::kFloat32, 12);
  expect_error(
      [&] {
        functional::slice(x, {0, 0}, {5, 5}, {1, 1});
      },
      ErrorCode::kOutOfRange, "0 <= start <= stop <= extent");
  expect_error(
      [&] {
        functional::slice(x, {3, 0}, {2, 5}, {1, 1});
      },
      ErrorCode::kOutOfRange, "(axis 0) for x (4, 5)");
  expect_error(
      [&] {
        functional::slice(x, {0, 0}, {4, 5}, {1, 0});
      },
      ErrorCode::kInvalidArgument, "step must be at least 1");
  expect_error([&] { functional::slice(x, {0}, {4}, {1}); }, ErrorCode::kInvalidArgument,
               "one entry per axis of x");
  const Tensor dy = random_tensor({2, 2}, DataType::kFloat32, 13);
  expect_error(
      [&] {
        functional::slice_grad(dy, {4, 5}, {0, 0}, {4, 5}, {1, 1});
      },
      ErrorCode::kInvalidArgument, "dy must have the shape of the slice");
}

TEST(Slice, SplitsOnlyOnAxesLeftWhole) {
  const auto sigs =
      signature_strings(signatures("slice", SliceParams{{0, 1, 0}, {4, 5, 6}, {1, 1, 1}},
                                   {{Shape{4, 5, 6}, DataType::kFloat32}}));
  EXPECT_EQ(sigs, (std::vector<std::string>{"S(0) -> S(0)", "S(2) -> S(2)", "B -> B", "P -> P"}));
  const auto grad_sigs =
      signature_strings(signatures("slice_grad", SliceGradParams{{4, 5}, {0, 0}, {4, 5}, {1, 2}},
                                   {{Shape{4, 3}, DataType::kFloat32}}));
  EXPECT_EQ(grad_sigs, (std::vector<std::string>{"S(0) -> S(0)", "B -> B", "P -> P"}));
}

TEST(Slice, KernelOnSplitPieceUsesTheTensorExtent) {
  // A rank holding rows [2, 4) of x (4, 6) sliced on columns only: the kernel must read the
  // row extent from its tensors while params stay logical.
  const OpSchema& op = OpRegistry::global().find("slice");
  const Tensor piece = random_tensor({2, 6}, DataType::kFloat32, 14);
  const Tensor out = Tensor::empty({2, 2}, DataType::kFloat32);
  const AnyParams params = SliceParams{{0, 1}, {4, 6}, {1, 3}};
  const std::vector<Tensor> inputs = {piece}, outputs = {out};
  op.find_kernel(DeviceType::kCPU, DataType::kFloat32)(KernelContext{params, inputs, outputs});
  Shape shape;
  expect_close(out, reference_slice(piece, {0, 1}, {2, 6}, {1, 3}, &shape), {2, 2}, 0, 0);
}

// ---- concat and split ----

TEST(Concat, GluesInputsAlongTheAxis) {
  const Tensor a = make_tensor({1, 2, 3, 4}, {2, 2});
  const Tensor b = make_tensor({5, 6}, {2, 1});
  const Tensor c = make_tensor({7, 8, 9, 10, 11, 12}, {2, 3});
  expect_close(functional::concat({a, b, c}, 1), {1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12}, {2, 6});
  expect_close(functional::concat({a, make_tensor({5, 6}, {1, 2})}, -2), {1, 2, 3, 4, 5, 6},
               {3, 2});
}

TEST(Concat, LargeInputsMatchReference) {
  const Tensor a = random_tensor({300, 100}, DataType::kFloat64, 15);
  const Tensor b = random_tensor({300, 150}, DataType::kFloat64, 16);
  const Tensor y = functional::concat({a, b}, 1);
  const std::vector<double> va = values_of(a), vb = values_of(b);
  std::vector<double> expected;
  for (int r = 0; r < 300; ++r) {
    expected.insert(expected.end(), va.begin() + r * 100, va.begin() + (r + 1) * 100);
    expected.insert(expected.end(), vb.begin() + r * 150, vb.begin() + (r + 1) * 150);
  }
  expect_close(y, expected, {300, 250}, 0, 0);
}

TEST(Concat, PromotesMixedDtypesInTheFunctionalApi) {
  const Tensor a = make_tensor({1, 2}, {2}, DataType::kInt64);
  const Tensor b = make_tensor({0.5}, {1}, DataType::kFloat32);
  const Tensor y = functional::concat({a, b}, 0);
  EXPECT_EQ(y.dtype(), DataType::kFloat32);
  expect_close(y, {1, 2, 0.5}, {3});
}

TEST(Concat, GradientSplitsDyBackToEachInput) {
  const Tensor a = random_tensor({2, 3, 2}, DataType::kFloat64, 17);
  const Tensor b = random_tensor({2, 1, 2}, DataType::kFloat64, 18);
  const Tensor c = random_tensor({2, 2, 2}, DataType::kFloat64, 19);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{functional::concat(in, 1)}; },
      {a, b, c});
}

TEST(Concat, RejectsMismatchedShapesAndDtypes) {
  static OpHandle op("concat");
  const Tensor a = random_tensor({2, 3}, DataType::kFloat32, 20);
  const Tensor b = random_tensor({3, 3}, DataType::kFloat32, 21);
  expect_error(
      [&] {
        functional::concat({a, a, b}, 1);
      },
      ErrorCode::kInvalidArgument, "inputs[2] (3, 3) and inputs[0] (2, 3)");
  expect_error(
      [&] {
        functional::concat({a, random_tensor({2}, DataType::kFloat32, 22)}, 0);
      },
      ErrorCode::kInvalidArgument, "same shape except on axis 0");
  expect_error(
      [&] {
        functional::concat({a, b}, 2);
      },
      ErrorCode::kOutOfRange, "dimension out of range");
  expect_error(
      [&] {
        op.call1(ConcatParams{0}, {a, random_tensor({2, 3}, DataType::kFloat64, 23)});
      },
      ErrorCode::kTypeError, "all inputs must have one dtype");
}

TEST(Concat, SplitsOnEveryAxisButTheConcatAxis) {
  const std::vector<TensorMeta> metas = {{Shape{2, 3, 4}, DataType::kFloat32},
                                         {Shape{2, 5, 4}, DataType::kFloat32}};
  const auto sigs = signature_strings(signatures("concat", ConcatParams{1}, metas));
  EXPECT_EQ(sigs, (std::vector<std::string>{"S(0) x S(0) -> S(0)", "S(2) x S(2) -> S(2)",
                                            "B x B -> B", "P x P -> P"}));
}

TEST(Split, CutsIntoPiecesOfTheGivenSizes) {
  const Tensor x = make_tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5}, DataType::kInt32);
  const std::vector<Tensor> parts = functional::split(x, -1, {2, 0, 3});
  ASSERT_EQ(parts.size(), 3u);
  expect_close(parts[0], {0, 1, 5, 6}, {2, 2});
  EXPECT_EQ(parts[1].shape(), Shape({2, 0}));
  expect_close(parts[2], {2, 3, 4, 7, 8, 9}, {2, 3});
}

TEST(Split, GradientConcatenatesWithZerosForUnusedOutputs) {
  const Tensor x = random_tensor({3, 4}, DataType::kFloat64, 24);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return functional::split(in[0], 0, {1, 2});
      },
      {x});
  // Only the last piece is used: the others get zero gradient.
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::split(in[0], 1, {1, 1, 2})[2]};
      },
      {x});
}

TEST(Split, RejectsSizesThatDoNotSumToTheExtent) {
  const Tensor x = random_tensor({3, 4}, DataType::kFloat32, 25);
  expect_error(
      [&] {
        functional::split(x, 1, {1, 2});
      },
      ErrorCode::kInvalidArgument,
      "sizes must sum to the extent of axis 1 (4). However, got sizes [1, 2] (sum 3)");
  expect_error(
      [&] {
        functional::split(x, 0, {4, -1});
      },
      ErrorCode::kInvalidArgument, "non-negative");
  expect_error([&] { functional::split(x, 0, {}); }, ErrorCode::kInvalidArgument,
               "at least one piece");
}

TEST(Split, SplitsOnEveryAxisButTheSplitAxis) {
  const auto sigs =
      signatures("split", SplitParams{0, {1, 2}}, {{Shape{3, 4}, DataType::kFloat32}});
  ASSERT_EQ(sigs.size(), 3u);
  EXPECT_EQ(sigs[0], (SbpSignature{{S(1)}, {S(1), S(1)}}));
  EXPECT_EQ(sigs[1], (SbpSignature{{B()}, {B(), B()}}));
  EXPECT_EQ(sigs[2], (SbpSignature{{P()}, {P(), P()}}));
}

}  // namespace
}  // namespace ofl
