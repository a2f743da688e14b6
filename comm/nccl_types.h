// NCCL's name for each element type that the pipeline sends and the trainer sums.
#pragma once
#include <cuda_bf16.h>
#include <nccl.h>

template <typename Element>
constexpr ncclDataType_t nccl_data_type();
template <>
constexpr ncclDataType_t nccl_data_type<double>() { return ncclFloat64; }
template <>
constexpr ncclDataType_t nccl_data_type<float>() { return ncclFloat32; }
template <>
constexpr ncclDataType_t nccl_data_type<__nv_bfloat16>() { return ncclBfloat16; }
