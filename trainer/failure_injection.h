// Test only: a failure on demand, to check that a rank failing in the middle of a step ends the
// whole job quickly and says so (tests/train_failure_test.py). TRAIN_TEST_FAIL="rank=R,step=S"
// makes world rank R throw in optimizer step S, after the step has begun on the device and before
// the stage's first transfer, so that its pipeline neighbours wait in transfers that never come.
// Unset (every real run), it does nothing.
#pragma once

// Throws std::runtime_error when TRAIN_TEST_FAIL names this rank and step (t = 1, 2, ...), or is
// not of the form rank=R,step=S.
void fail_if_injected(int world_rank, int t);
