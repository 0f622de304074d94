// The one place CUDA and HIP differ for hoist: the GPU backend (gpu_device.cpp) is written
// against these names and compiled once per vendor. Build with HOIST_GPU_HIP for ROCm.
#pragma once

#if defined(HOIST_GPU_HIP)
#include <hip/hip_runtime_api.h>
#define HOIST_GPU_PREFIX "hip"
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuDeviceProp_t = hipDeviceProp_t;
inline constexpr gpuError_t gpuSuccess = hipSuccess;
inline constexpr gpuError_t gpuErrorNotReady = hipErrorNotReady;
inline constexpr gpuError_t gpuErrorInsufficientDriver = hipErrorInsufficientDriver;
inline constexpr const char* kGpuDriverLibrary = "libamdhip64.so";
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostRegisterPortable(ptr, bytes) hipHostRegister(ptr, bytes, hipHostRegisterPortable)
#define gpuHostUnregister hipHostUnregister
#define gpuStreamCreateNonBlocking(s) hipStreamCreateWithFlags(s, hipStreamNonBlocking)
#define gpuStreamDestroy hipStreamDestroy
#define gpuEventCreateNoTiming(e) hipEventCreateWithFlags(e, hipEventDisableTiming)
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuMemcpyAsyncH2D(dst, src, n, s) hipMemcpyAsync(dst, src, n, hipMemcpyHostToDevice, s)
#define gpuMemcpy2DAsyncH2D(dst, dpitch, src, spitch, width, rows, s) \
  hipMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, hipMemcpyHostToDevice, s)
#define gpuMemcpyD2H(dst, src, n) hipMemcpy(dst, src, n, hipMemcpyDeviceToHost)
#define gpuMemcpyAsyncD2D(dst, src, n, s) hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToDevice, s)
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuDeviceCanAccessPeer hipDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess hipDeviceEnablePeerAccess
inline constexpr gpuError_t gpuErrorPeerAccessAlreadyEnabled = hipErrorPeerAccessAlreadyEnabled;
#define gpuMemcpyPeerAsync hipMemcpyPeerAsync
#define gpuGetLastError hipGetLastError
#else
#include <cuda_runtime_api.h>
#define HOIST_GPU_PREFIX "cuda"
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuDeviceProp_t = cudaDeviceProp;
inline constexpr gpuError_t gpuSuccess = cudaSuccess;
inline constexpr gpuError_t gpuErrorNotReady = cudaErrorNotReady;
inline constexpr gpuError_t gpuErrorInsufficientDriver = cudaErrorInsufficientDriver;
#if defined(_WIN32)
inline constexpr const char* kGpuDriverLibrary = "nvcuda.dll";
#else
inline constexpr const char* kGpuDriverLibrary = "libcuda.so.1";
#endif
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostRegisterPortable(ptr, bytes) cudaHostRegister(ptr, bytes, cudaHostRegisterPortable)
#define gpuHostUnregister cudaHostUnregister
#define gpuStreamCreateNonBlocking(s) cudaStreamCreateWithFlags(s, cudaStreamNonBlocking)
#define gpuStreamDestroy cudaStreamDestroy
#define gpuEventCreateNoTiming(e) cudaEventCreateWithFlags(e, cudaEventDisableTiming)
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuMemcpyAsyncH2D(dst, src, n, s) cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s)
#define gpuMemcpy2DAsyncH2D(dst, dpitch, src, spitch, width, rows, s) \
  cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyHostToDevice, s)
#define gpuMemcpyD2H(dst, src, n) cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost)
#define gpuMemcpyAsyncD2D(dst, src, n, s) cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s)
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuDeviceCanAccessPeer cudaDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess cudaDeviceEnablePeerAccess
inline constexpr gpuError_t gpuErrorPeerAccessAlreadyEnabled = cudaErrorPeerAccessAlreadyEnabled;
#define gpuMemcpyPeerAsync cudaMemcpyPeerAsync
#define gpuGetLastError cudaGetLastError
#endif
