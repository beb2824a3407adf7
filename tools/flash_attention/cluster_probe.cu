// How many clusters of two blocks of the D = 128 Hopper kernel's size (384 threads, 193 KB of
// dynamic shared memory, one block per SM) the GPU runs at once (NOTES.md, h31): a persistent
// grid of pairs gets min(units, this) clusters, so fewer than SMs / 2 would leave SMs idle.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -o /tmp/cluster_probe cluster_probe.cu && /tmp/cluster_probe
#include <cstdio>
#include <cuda_runtime.h>

__global__ void __launch_bounds__(384, 1) probe_kernel(int* out) {
    extern __shared__ int smem[];
    if (threadIdx.x == 0 && out) out[blockIdx.x] = smem[0];
}

int main() {
    const int smem = 64 * 1024 + 128 * 1024 + 1024;  // Sm90Traits<_, 128, 128, 2, 2, 1>::kSmemBytes
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
        cudaSuccess) {
        printf("cudaFuncSetAttribute failed\n");
        return 1;
    }
    for (int size = 1; size <= 4; size *= 2) {
        cudaLaunchAttribute cluster;
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim.x = size;
        cluster.val.clusterDim.y = 1;
        cluster.val.clusterDim.z = 1;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(size);
        config.blockDim = dim3(384);
        config.dynamicSmemBytes = smem;
        config.attrs = &cluster;
        config.numAttrs = 1;
        int fit = 0;
        const cudaError_t err = cudaOccupancyMaxActiveClusters(&fit, probe_kernel, &config);
        printf("SMs %d, cluster size %d: %d clusters at once (%d blocks) %s\n", sms, size, fit,
               fit * size, cudaGetErrorString(err));
    }
    return 0;
}
