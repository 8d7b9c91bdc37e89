// Owns the CUDA backend's face to the rest of the program: the backend object and device discovery.
// Plain C++: no CUDA header reaches code that includes this.
#pragma once

#include <string>

#include "backend/backend.h"

namespace mt {

// The backend of the selected GPU (device 0 unless cuda_select_device chose another).
Backend& cuda_backend();
// GPUs visible to this process; 0 (never an error) without a driver or a GPU. `why`, when given,
// receives the runtime's reason for 0.
int cuda_device_count(std::string* why = nullptr);
// Picks this process's GPU; call before the backend's first use (one GPU per rank).
void cuda_select_device(int index);
// "NVIDIA H200 (sm_90, 139.8 GiB, 132 SMs)" for the selected device.
std::string cuda_device_description();

}  // namespace mt
