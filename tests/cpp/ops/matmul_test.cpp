#include "oneflowlike/ops/matmul.h"

#include <string>

#include "oneflowlike/autograd.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/eager.h"
#include "oneflowlike/kernels/cuda/gemm_layout.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::random_tensor;
using testing::values_of;

// alpha * op(a) @ op(b) for row-major (rows, K)-folded a and 2-D b, in double.
std::vector<double> reference_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t m,
                                     int64_t k, int64_t n, double alpha = 1.0) {
  const std::vector<double> va = values_of(a), vb = values_of(b);
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? va[p * m + i] : va[i * k + p];
        const double y = tb ? vb[j * k + p] : vb[p * n + j];
        acc += x * y;
      }
      out[i * n + j] = alpha * acc;
    }
  }
  return out;
}

using testing::expect_error;

TEST(Matmul, TwoDProductsMatchReferenceForEveryTransposeFlag) {
  const int64_t m = 5, k = 7, n = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, 1);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
        const Tensor y = functional::matmul(a, b, ta, tb, /*alpha=*/0.5);
        EXPECT_EQ(y.dtype(), dtype);
        expect_close(y, reference_matmul(a, b, ta, tb, m, k, n, 0.5), Shape{m, n});
      }
    }
  }
}

TEST(Matmul, LargeFloat32ProductMatchesReference) {
  const int64_t m = 67, k = 129, n = 45;
  const Tensor a = random_tensor({m, k}, DataType::kFloat32, 3);
  const Tensor b = random_tensor({k, n}, DataType::kFloat32, 4);
  expect_close(functional::matmul(a, b), reference_matmul(a, b, false, false, m, k, n), Shape{m, n},
               1e-4, 1e-4);
}

TEST(Matmul, IntegerProductsAreExact) {
  const Tensor a = testing::make_tensor({1, 2, 3, 4, 5, 6}, {2, 3}, DataType::kInt64);
  const Tensor b = testing::make_tensor({1, 0, 0, 1, 1, 1}, {3, 2}, DataType::kInt64);
  expect_close(functional::matmul(a, b), {4, 5, 10, 11}, Shape{2, 2}, 0, 0);
}

TEST(Matmul, NdInputIsFoldedIntoRows) {
  const Tensor a = random_tensor({2, 3, 4}, DataType::kFloat32, 5);
  const Tensor b = random_tensor({6, 4}, DataType::kFloat32, 6);
  const Tensor y = functional::matmul(a, b, false, /*transpose_b=*/true);
  expect_close(y, reference_matmul(a, b, false, true, 6, 4, 6), Shape{2, 3, 6});
}

TEST(Matmul, EmptyContractionGivesZeros) {
  const Tensor a = Tensor::empty({3, 0}, DataType::kFloat32);
  const Tensor b = Tensor::empty({0, 2}, DataType::kFloat32);
  expect_close(functional::matmul(a, b), std::vector<double>(6, 0.0), Shape{3, 2});
}

TEST(Matmul, GradientsMatchFiniteDifferencesForEveryTransposeFlag) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{4, 3} : Shape{3, 4}, DataType::kFloat64, 7);
      const Tensor b = random_tensor(tb ? Shape{2, 4} : Shape{4, 2}, DataType::kFloat64, 8);
      expect_gradients_match(
          [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{functional::matmul(in[0], in[1], ta, tb, 1.5)};
          },
          {a, b});
    }
  }
}

TEST(Matmul, GradientsOfFoldedNdInputMatchFiniteDifferences) {
  for (bool tb : {false, true}) {
    const Tensor a = random_tensor({2, 3, 4}, DataType::kFloat64, 9);
    const Tensor b = random_tensor(tb ? Shape{5, 4} : Shape{4, 5}, DataType::kFloat64, 10);
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{functional::matmul(in[0], in[1], false, tb)};
        },
        {a, b});
  }
}

TEST(Matmul, MismatchedContractedExtentsRaiseValueError) {
  const Tensor a = random_tensor({4, 8}, DataType::kFloat32, 1);
  const Tensor b = random_tensor({6, 5}, DataType::kFloat32, 2);
  expect_error([&] { functional::matmul(a, b); }, ErrorCode::kInvalidArgument,
               "contracted extents of a and b must match");
  expect_error([&] { functional::matmul(a, b); }, ErrorCode::kInvalidArgument,
               "a (4, 8) float32, b (6, 5) float32");
}

TEST(Matmul, TransposeAOfNdInputIsRejected) {
  const Tensor a = random_tensor({2, 4, 3}, DataType::kFloat32, 1);
  const Tensor b = random_tensor({4, 5}, DataType::kFloat32, 2);
  expect_error([&] { functional::matmul(a, b, /*transpose_a=*/true); }, ErrorCode::kInvalidArgument,
               "transpose_a needs a 2-D a");
}

TEST(Matmul, BatchedBAndVectorsAndMixedDtypesAreRejected) {
  const Tensor a = random_tensor({2, 3, 4}, DataType::kFloat32, 1);
  expect_error(
      [&] {
        functional::matmul(a, random_tensor({2, 4, 5}, DataType::kFloat32, 2));
      },
      ErrorCode::kInvalidArgument, "b must be 2-D");
  expect_error([&] { functional::matmul(random_tensor({4}, DataType::kFloat32, 3), a); },
               ErrorCode::kInvalidArgument, "at least 2 axes");
  expect_error(
      [&] {
        functional::matmul(random_tensor({3, 4}, DataType::kFloat32, 4),
                           random_tensor({4, 2}, DataType::kFloat64, 5));
      },
      ErrorCode::kTypeError, "one dtype");
}

std::vector<std::string> signatures_of(const char* op, const AnyParams& params,
                                       const std::vector<TensorMeta>& metas) {
  const OpSchema& schema = OpRegistry::global().find(op);
  const auto sigs = (*schema.get<FSbpSignatures>())(InferContext(schema, params, metas));
  std::vector<std::string> out;
  for (const SbpSignature& s : sigs) out.push_back(s.to_string());
  return out;
}

TEST(Matmul, SbpSignaturesCoverRowColumnAndReductionSplits) {
  const std::vector<TensorMeta> metas{{Shape{4, 6}, DataType::kFloat32},
                                      {Shape{6, 8}, DataType::kFloat32}};
  EXPECT_EQ(signatures_of("matmul", MatmulParams{}, metas),
            (std::vector<std::string>{"S(0) x B -> S(0)", "B x S(1) -> S(1)", "S(1) x S(0) -> P",
                                      "P x B -> P", "B x P -> P", "B x B -> B"}));
}

TEST(Matmul, SbpSignaturesFollowTransposeFlagsAndBatchAxes) {
  const std::vector<TensorMeta> transposed{{Shape{6, 4}, DataType::kFloat32},
                                           {Shape{8, 6}, DataType::kFloat32}};
  EXPECT_EQ(signatures_of("matmul", MatmulParams{true, true, 1.0}, transposed),
            (std::vector<std::string>{"S(1) x B -> S(0)", "B x S(0) -> S(1)", "S(0) x S(1) -> P",
                                      "P x B -> P", "B x P -> P", "B x B -> B"}));
  const std::vector<TensorMeta> folded{{Shape{2, 4, 6}, DataType::kFloat32},
                                       {Shape{6, 8}, DataType::kFloat32}};
  const auto sigs = signatures_of("matmul", MatmulParams{}, folded);
  ASSERT_EQ(sigs.size(), 7u);
  EXPECT_EQ(sigs[0], "S(0) x B -> S(0)");
  EXPECT_EQ(sigs[1], "S(1) x B -> S(1)");
  EXPECT_EQ(sigs[3], "S(2) x S(0) -> P");
}

// Reference batch loop over reference_matmul.
std::vector<double> reference_batch(const Tensor& a, const Tensor& b, bool ta, bool tb,
                                    int64_t batches, int64_t m, int64_t k, int64_t n) {
  std::vector<double> out;
  for (int64_t i = 0; i < batches; ++i) {
    const Tensor ai = a.view({batches, m * k}).narrow_rows(i, i + 1).clone();
    const Tensor bi = b.view({batches, k * n}).narrow_rows(i, i + 1).clone();
    const auto one = reference_matmul(ai, bi, ta, tb, m, k, n);
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

TEST(BatchMatmul, ManySmallAndFewLargeBatchesMatchReference) {
  struct Case {
    int64_t batch0, batch1, m, k, n;
  };
  for (const Case c : {Case{3, 5, 2, 3, 4}, Case{1, 2, 70, 80, 90}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Tensor a = random_tensor(
            ta ? Shape{c.batch0, c.batch1, c.k, c.m} : Shape{c.batch0, c.batch1, c.m, c.k},
            DataType::kFloat32, 11);
        const Tensor b = random_tensor(
            tb ? Shape{c.batch0, c.batch1, c.n, c.k} : Shape{c.batch0, c.batch1, c.k, c.n},
            DataType::kFloat32, 12);
        const Tensor y = functional::batch_matmul(a, b, ta, tb);
        expect_close(y, reference_batch(a, b, ta, tb, c.batch0 * c.batch1, c.m, c.k, c.n),
                     Shape{c.batch0, c.batch1, c.m, c.n}, 1e-4, 1e-4);
      }
    }
  }
}

// Note [Low-precision matmul on the CPU]: bfloat16 through oneDNN's bf16 matmul (AMX here),
// float16 through float32; both against the float64 product of the same rounded operands,
// within the dtype's tolerance (Note [Low-precision tolerances]), and against each transpose
// flag and alpha, for a plain and a batched product large enough for several AMX tiles.
TEST(Matmul, SixteenBitDtypesMatchTheProductOfTheirOperands) {
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16}) {
    const double tol = testing::dtype_tolerance(dtype);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), ta ? " a^T" : "", tb ? " b^T" : ""));
        const int64_t m = 37, k = 70, n = 45;
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, 1);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
        const Tensor y = functional::matmul(a, b, ta, tb, /*alpha=*/0.5);
        EXPECT_EQ(y.dtype(), dtype);
        expect_close(y, reference_matmul(a, b, ta, tb, m, k, n, 0.5), Shape{m, n}, tol, tol);
        const Tensor ba = random_tensor(ta ? Shape{3, k, m} : Shape{3, m, k}, dtype, 3);
        const Tensor bb = random_tensor(tb ? Shape{3, n, k} : Shape{3, k, n}, dtype, 4);
        expect_close(functional::batch_matmul(ba, bb, ta, tb),
                     reference_batch(ba, bb, ta, tb, 3, m, k, n), Shape{3, m, n}, tol, tol);
      }
    }
  }
}

// MatmulParams::float32_out (Note [Casts folded into products]): 16-bit operands, the float32
// sums written as they are. Products of bf16 or f16 values are exact in float32, so the result is
// the float64 product within float32 rounding of the sums, far inside the 16-bit tolerance the
// rounded result meets; every transpose flag, plain and batched.
TEST(Matmul, Float32OutKeepsTheFloat32Sums) {
  static OpHandle matmul("matmul"), batch_matmul("batch_matmul");
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), ta ? " a^T" : "", tb ? " b^T" : ""));
        const int64_t m = 37, k = 70, n = 45;
        const MatmulParams params{ta, tb, 0.5, /*float32_out=*/true};
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, 1);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
        const Tensor y = matmul.call1(params, {a, b});
        EXPECT_EQ(y.dtype(), DataType::kFloat32);
        expect_close(y, reference_matmul(a, b, ta, tb, m, k, n, 0.5), Shape{m, n}, 1e-5, 1e-5);
        const Tensor ba = random_tensor(ta ? Shape{3, k, m} : Shape{3, m, k}, dtype, 3);
        const Tensor bb = random_tensor(tb ? Shape{3, n, k} : Shape{3, k, n}, dtype, 4);
        MatmulParams batched = params;
        batched.alpha = 1.0;
        const Tensor by = batch_matmul.call1(batched, {ba, bb});
        EXPECT_EQ(by.dtype(), DataType::kFloat32);
        expect_close(by, reference_batch(ba, bb, ta, tb, 3, m, k, n), Shape{3, m, n}, 1e-5, 1e-5);
      }
    }
  }
}

// Needs a GPU (skipped without one, as in CI): float32_out through cuBLASLt (a 16-bit a and b,
// a float32 D) against the float64 product, as the CPU's test above.
TEST(MatmulCuda, Float32OutKeepsTheFloat32Sums) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  static OpHandle matmul("matmul"), batch_matmul("batch_matmul");
  const Device gpu{DeviceType::kCUDA, 0};
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), tb ? " b^T" : ""));
      const int64_t m = 37, k = 70, n = 45;
      const Tensor a = random_tensor({m, k}, dtype, 1);
      const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
      const Tensor y = matmul.call1(MatmulParams{false, tb, 0.5, true}, {a.to(gpu), b.to(gpu)});
      EXPECT_EQ(y.dtype(), DataType::kFloat32);
      expect_close(y.to(Device::cpu()), reference_matmul(a, b, false, tb, m, k, n, 0.5),
                   Shape{m, n}, 1e-5, 1e-5);
      const Tensor ba = random_tensor({3, m, k}, dtype, 3);
      const Tensor bb = random_tensor(tb ? Shape{3, n, k} : Shape{3, k, n}, dtype, 4);
      const Tensor by =
          batch_matmul.call1(MatmulParams{false, tb, 1.0, true}, {ba.to(gpu), bb.to(gpu)});
      expect_close(by.to(Device::cpu()), reference_batch(ba, bb, false, tb, 3, m, k, n),
                   Shape{3, m, n}, 1e-5, 1e-5);
    }
  }
}

// A float32_out product's gradient casts dy to the operands' dtype first: the same gradients,
// bit for bit, as the cast after a 16-bit product it replaces (Note [Casts folded into
// products]).
TEST(Matmul, Float32OutGradientsEqualThoseOfACastAfterTheProduct) {
  static OpHandle matmul("matmul");
  const Tensor dy = random_tensor({5, 3}, DataType::kFloat32, 9);
  const auto grads = [&](bool folded) {
    Tensor a = random_tensor({5, 4}, DataType::kBFloat16, 7);
    Tensor b = random_tensor({3, 4}, DataType::kBFloat16, 8);
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    const Tensor y =
        folded ? matmul.call1(MatmulParams{false, true, 1.0, true}, {a, b})
               : functional::cast(functional::matmul(a, b, false, true), DataType::kFloat32);
    backward({y}, {dy});
    return std::vector<std::vector<double>>{values_of(a.grad()), values_of(b.grad())};
  };
  EXPECT_EQ(grads(true), grads(false));
}

TEST(Matmul, Float32OutOfFloat32OperandsIsRefused) {
  static OpHandle matmul("matmul");
  const Tensor a = random_tensor({2, 3}, DataType::kFloat32, 1);
  const Tensor b = random_tensor({3, 4}, DataType::kFloat32, 2);
  expect_error(
      [&] {
        matmul.call1(MatmulParams{false, false, 1.0, true}, {a, b});
      },
      ErrorCode::kTypeError,
      "[matmul] float32_out is for float16 or bfloat16 operands. However, got a (2, 3) "
      "float32, b (3, 4) float32 with float32_out=true.");
}

TEST(BatchMatmul, Float64MatchesReference) {
  const Tensor a = random_tensor({4, 3, 5}, DataType::kFloat64, 13);
  const Tensor b = random_tensor({4, 5, 2}, DataType::kFloat64, 14);
  expect_close(functional::batch_matmul(a, b), reference_batch(a, b, false, false, 4, 3, 5, 2),
               Shape{4, 3, 2}, 1e-12, 1e-12);
}

TEST(BatchMatmul, GradientsMatchFiniteDifferencesForEveryTransposeFlag) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, DataType::kFloat64, 15);
      const Tensor b = random_tensor(tb ? Shape{2, 2, 4} : Shape{2, 4, 2}, DataType::kFloat64, 16);
      expect_gradients_match(
          [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{functional::batch_matmul(in[0], in[1], ta, tb, 0.5)};
          },
          {a, b});
    }
  }
}

// Needs a GPU (skipped without one, as in CI): operands that are views starting mid-block, 2
// bytes aligned for the 16-bit dtypes, next to fresh (256-byte aligned) copies of the same
// shape. cuBLASLt assumes 256-byte alignment unless told, so matmul.cu keys its plans by it.
TEST(MatmulCuda, OperandsStartingMidBlockMatchTheReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  const Device gpu{DeviceType::kCUDA, 0};
  const Device cpu = Device::cpu();
  for (DataType dtype :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tol = dtype == DataType::kFloat16    ? 1e-3
                       : dtype == DataType::kBFloat16 ? 8e-3
                                                      : 1e-5;
    // a (3, 17) from row 1 of (5, 17), b (17, 5) from row 1 of (18, 5): 17 and 5 elements in.
    const Tensor a = random_tensor({5, 17}, dtype, 41).to(gpu).narrow_rows(1, 4);
    const Tensor b = random_tensor({18, 5}, dtype, 42).to(gpu).narrow_rows(1, 18);
    const Tensor a_host = a.to(cpu), b_host = b.to(cpu);
    const std::vector<double> want = reference_matmul(a_host, b_host, false, false, 3, 17, 5);
    expect_close(functional::matmul(a, b).to(cpu), want, Shape{3, 5}, tol, tol);
    expect_close(functional::matmul(a_host.to(gpu), b_host.to(gpu)).to(cpu), want, Shape{3, 5}, tol,
                 tol);
    // Batches 1 and 2 of (4, 3, 17) x (4, 17, 5): 51 and 85 elements in, odd batch strides.
    const Tensor ba = random_tensor({4, 3, 17}, dtype, 43).to(gpu).narrow_rows(1, 3);
    const Tensor bb = random_tensor({4, 17, 5}, dtype, 44).to(gpu).narrow_rows(1, 3);
    const Tensor ba_host = ba.to(cpu), bb_host = bb.to(cpu);
    const std::vector<double> want_batch =
        reference_batch(ba_host, bb_host, false, false, 2, 3, 17, 5);
    expect_close(functional::batch_matmul(ba, bb).to(cpu), want_batch, Shape{2, 3, 5}, tol, tol);
    expect_close(functional::batch_matmul(ba_host.to(gpu), bb_host.to(gpu)).to(cpu), want_batch,
                 Shape{2, 3, 5}, tol, tol);
  }
}

TEST(BatchMatmul, DifferentBatchDimsAndRanksRaiseValueError) {
  const Tensor a = random_tensor({2, 3, 4}, DataType::kFloat32, 1);
  expect_error(
      [&] {
        functional::batch_matmul(a, random_tensor({3, 4, 5}, DataType::kFloat32, 2));
      },
      ErrorCode::kInvalidArgument, "identical batch dims");
  expect_error(
      [&] {
        functional::batch_matmul(a, random_tensor({4, 5}, DataType::kFloat32, 2));
      },
      ErrorCode::kInvalidArgument, "same number of axes, at least 3");
  expect_error(
      [&] {
        functional::batch_matmul(a, random_tensor({2, 5, 5}, DataType::kFloat32, 2));
      },
      ErrorCode::kInvalidArgument, "contracted extents");
}

TEST(BatchMatmul, SbpSignaturesSplitBatchRowsColumnsAndReduction) {
  const std::vector<TensorMeta> metas{{Shape{2, 4, 6}, DataType::kFloat32},
                                      {Shape{2, 6, 8}, DataType::kFloat32}};
  EXPECT_EQ(
      signatures_of("batch_matmul", MatmulParams{}, metas),
      (std::vector<std::string>{"S(0) x S(0) -> S(0)", "S(1) x B -> S(1)", "B x S(2) -> S(2)",
                                "S(2) x S(1) -> P", "P x B -> P", "B x P -> P", "B x B -> B"}));
}

// The addressing of the CUDA kernels (kernels/cuda/gemm_layout.h), checked on the CPU: the
// tiled kernel's element offsets, and the column-major problem matmul.cu hands cuBLASLt (Note
// [Row-major products in cuBLASLt]) run through cuBLASLt's definition of a product.

// d = op(a) @ op(b) as cuBLASLt defines it for one batch: column-major stored matrices, element
// (r, c) at r + c * ld, op transposing when its flag is set.
void column_major_product(const gemm::ColumnMajorProduct& c, const double* a, const double* b,
                          double* d) {
  // The stored shapes agree with (m, k) x (k, n) -> (m, n) after the ops, and each leading
  // dimension covers its rows, as cuBLASLt requires.
  EXPECT_EQ(c.transpose_a ? c.a.cols : c.a.rows, c.m);
  EXPECT_EQ(c.transpose_a ? c.a.rows : c.a.cols, c.k);
  EXPECT_EQ(c.transpose_b ? c.b.cols : c.b.rows, c.k);
  EXPECT_EQ(c.transpose_b ? c.b.rows : c.b.cols, c.n);
  EXPECT_EQ(c.d.rows, c.m);
  EXPECT_EQ(c.d.cols, c.n);
  EXPECT_GE(c.a.ld, c.a.rows);
  EXPECT_GE(c.b.ld, c.b.rows);
  EXPECT_GE(c.d.ld, c.d.rows);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double x = c.transpose_a ? a[p + i * c.a.ld] : a[i + p * c.a.ld];
        const double y = c.transpose_b ? b[j + p * c.b.ld] : b[p + j * c.b.ld];
        acc += x * y;
      }
      d[i + j * c.d.ld] = acc;
    }
  }
}

TEST(Matmul, CudaKernelAddressingMatchesTheCpuKernelForEveryTransposeFlag) {
  struct Case {
    int64_t batches, m, k, n;
  };
  for (const Case c : {Case{1, 1, 1, 1}, Case{1, 1, 3, 17}, Case{1, 17, 1, 3}, Case{1, 3, 17, 1},
                       Case{3, 5, 7, 3}, Case{2, 1, 4, 1}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(str_cat("batches ", c.batches, ", m ", c.m, ", k ", c.k, ", n ", c.n,
                             ", transpose_a ", ta, ", transpose_b ", tb));
        const Tensor a = random_tensor(ta ? Shape{c.batches, c.k, c.m} : Shape{c.batches, c.m, c.k},
                                       DataType::kFloat64, 31);
        const Tensor b = random_tensor(tb ? Shape{c.batches, c.n, c.k} : Shape{c.batches, c.k, c.n},
                                       DataType::kFloat64, 32);
        const Tensor want = functional::batch_matmul(a, b, ta, tb);
        const std::vector<double> va = values_of(a), vb = values_of(b);
        const gemm::RowMajorProduct p{ta, tb, c.m, c.n, c.k};
        std::vector<double> tiled(c.batches * c.m * c.n), blas(c.batches * c.m * c.n);
        for (int64_t batch = 0; batch < c.batches; ++batch) {
          const double* a_batch = va.data() + batch * p.a_stride();
          const double* b_batch = vb.data() + batch * p.b_stride();
          for (int64_t i = 0; i < c.m; ++i) {
            for (int64_t j = 0; j < c.n; ++j) {
              double acc = 0;
              for (int64_t q = 0; q < c.k; ++q) {
                acc += a_batch[p.a_offset(i, q)] * b_batch[p.b_offset(q, j)];
              }
              tiled[batch * p.out_stride() + i * c.n + j] = acc;
            }
          }
          // cuBLASLt's a is our b and its b our a.
          column_major_product(gemm::column_major(p), b_batch, a_batch,
                               blas.data() + batch * p.out_stride());
        }
        const Shape shape{c.batches, c.m, c.n};
        expect_close(want, tiled, shape, 1e-12, 1e-12);
        expect_close(want, blas, shape, 1e-12, 1e-12);
      }
    }
  }
}

// Note [Products over rows]: (..., K) x (..., N) -> (K, N), a^T b over every leading index, in
// float32, float64 and the 16-bit dtypes (float32_out too), and its gradients.
TEST(BroadcastMatmulGradB, SumsTheProductsOfEveryRow) {
  const int64_t k = 6, n = 7;
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16, DataType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tol = testing::dtype_tolerance(dtype);
    const Tensor a = random_tensor({3, 5, k}, dtype, 1);
    const Tensor b = random_tensor({3, 5, n}, dtype, 2);
    const Tensor y = functional::broadcast_matmul_grad_b(a, b, 0.5);
    EXPECT_EQ(y.dtype(), dtype);
    // a's rows (15, K) read transposed: the (K, 15) matrix.
    expect_close(y, reference_matmul(a, b, true, false, k, 15, n, 0.5), Shape{k, n}, tol, tol);
    if (dtype == DataType::kBFloat16 || dtype == DataType::kFloat16) {
      static OpHandle op("broadcast_matmul_grad_b");
      const Tensor wide = op.call1(MatmulParams{false, false, 0.5, true}, {a, b});
      EXPECT_EQ(wide.dtype(), DataType::kFloat32);
      expect_close(wide, reference_matmul(a, b, true, false, k, 15, n, 0.5), Shape{k, n}, 1e-5,
                   1e-5);
    }
  }
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::broadcast_matmul_grad_b(in[0], in[1], 1.5)};
      },
      {random_tensor({2, 3, 4}, DataType::kFloat64, 3),
       random_tensor({2, 3, 5}, DataType::kFloat64, 4)});
}

// A matmul's weight gradient of an N-d input equals the 2-D product of the folded rows. (That it
// is this op, without reshapes that would undo a split of a leading axis, is what keeps the
// context-parallel plans free of all-to-alls: tests/python/test_context_parallel.py.)
TEST(BroadcastMatmulGradB, IsTheWeightGradientOfAnNdMatmul) {
  for (bool tb : {false, true}) {
    Tensor a = random_tensor({2, 3, 4}, DataType::kFloat64, 5);
    Tensor w = random_tensor(tb ? Shape{5, 4} : Shape{4, 5}, DataType::kFloat64, 6);
    w.set_requires_grad(true);
    const Tensor dy = random_tensor({2, 3, 5}, DataType::kFloat64, 7);
    backward({functional::matmul(a, w, false, tb)}, {dy});
    const Tensor rows = a.view({6, 4}), dy_rows = dy.view({6, 5});
    const Tensor want = tb ? functional::matmul(dy_rows, rows, true, false)
                           : functional::matmul(rows, dy_rows, true);
    expect_close(w.grad(), values_of(want), want.shape(), 1e-12, 1e-12);
  }
}

TEST(BroadcastMatmulGradB, MismatchedRowsAndFlagsRaiseNamingThem) {
  const Tensor a = random_tensor({2, 3, 4}, DataType::kFloat32, 1);
  testing::expect_error_phrases(
      [&] {
        functional::broadcast_matmul_grad_b(a, random_tensor({2, 4, 5}, DataType::kFloat32, 2));
      },
      ErrorCode::kInvalidArgument,
      {"[broadcast_matmul_grad_b] a (..., K) and b (..., N) must have the same leading axes",
       "(2, 4, 5)"});
  static OpHandle op("broadcast_matmul_grad_b");
  expect_error(
      [&] {
        op.call1(MatmulParams{true, false, 1.0}, {a, a});
      },
      ErrorCode::kInvalidArgument, "takes no transpose flags");
}

TEST(BroadcastMatmulGradB, EveryLeadingAxisSplitsBothIntoPartialSums) {
  const OpSchema& op = OpRegistry::global().find("broadcast_matmul_grad_b");
  const AnyParams params = MatmulParams{};
  const std::vector<TensorMeta> metas{{Shape{2, 3, 4}, DataType::kFloat32},
                                      {Shape{2, 3, 5}, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& sig : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
    got.push_back(sig.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) x S(0) -> P", "S(1) x S(1) -> P",
                                           "S(2) x B -> S(0)", "B x S(2) -> S(1)", "P x B -> P",
                                           "B x P -> P", "B x B -> B"}));
}

// Needs a GPU (skipped without one, as in CI): the CUDA kernel against the CPU's.
TEST(BroadcastMatmulGradBCuda, MatchesTheCpuKernel) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  const Device gpu{DeviceType::kCUDA, 0};
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor a = random_tensor({3, 50, 33}, dtype, 1);
    const Tensor b = random_tensor({3, 50, 17}, dtype, 2);
    const Tensor want = functional::broadcast_matmul_grad_b(a, b, 0.5);
    const Tensor got = functional::broadcast_matmul_grad_b(a.to(gpu), b.to(gpu), 0.5);
    const double tol = testing::dtype_tolerance(dtype);
    expect_close(got.to(Device::cpu()), values_of(want), want.shape(), tol, tol);
  }
}

TEST(Linear, AddsBiasToProductWithTransposedWeight) {
  const Tensor x = random_tensor({2, 3, 4}, DataType::kFloat32, 17);
  const Tensor w = random_tensor({5, 4}, DataType::kFloat32, 18);
  const Tensor bias = random_tensor({5}, DataType::kFloat32, 19);
  std::vector<double> expected = reference_matmul(x, w, false, true, 6, 4, 5);
  const std::vector<double> vb = values_of(bias);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += vb[i % 5];
  expect_close(functional::linear(x, w, bias), expected, Shape{2, 3, 5});
  expect_close(functional::linear(x, w), reference_matmul(x, w, false, true, 6, 4, 5),
               Shape{2, 3, 5});
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::linear(in[0], in[1], in[2])};
      },
      {random_tensor({3, 4}, DataType::kFloat64, 20), random_tensor({2, 4}, DataType::kFloat64, 21),
       random_tensor({2}, DataType::kFloat64, 22)});
}

}  // namespace
}  // namespace ofl
