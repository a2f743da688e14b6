// Naming where a step's gradient stopped being finite. The global norm already has every
// (tensor, layer)'s squared sum, gathered on every stage in llm.c's order (comm/collectives.h's
// norm-partials table), and a NaN or an infinity in a gradient makes its slot's sum NaN or
// infinite: so the first non-finite slot is the first tensor, in llm.c's order, whose gradient is
// not finite, and every rank finds the same one without another exchange. (A gradient so large
// that its squares overflow fp32, above about 1e19, counts as not finite too: its norm is not,
// and no clipping could make an update from it.)
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gpt.cuh"
#include "pipeline/schedule.h"

// "first in stage 2, tensor fcw layer 5" for the first non-finite slot of partials
// (norm_slot_count(L) values); "" when every slot is finite. virtual_stages is split_layers'
// (index: virtual stage), and placement says which stage holds each.
std::string first_nonfinite_gradient(const std::vector<float>& partials, const GPTConfig& config,
                                     const std::vector<LayerRange>& virtual_stages, const Placement& placement);

// Why a step whose mean loss or gradient norm is not finite is skipped, for the step line:
// "non-finite gradient (first in stage 2, tensor fcw layer 5)", "non-finite gradient norm (every
// tensor's squared sum is finite; their total overflows)", or, with a finite norm, "non-finite loss".
std::string skipped_step_reason(double norm, const std::string& first_nonfinite);
