// Precompiled header of pipescope::exec: the LibTorch headers every heavy translation unit
// needs, parsed once per build instead of once per file.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adamw.h>
#include <torch/csrc/autograd/autograd.h>
