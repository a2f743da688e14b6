// The first thing every MPI program of the project does: initialise MPI at the thread level the
// project needs, and give each rank its own device. NCCL refuses a communicator in which two
// ranks of one node share a GPU ("Duplicate GPU detected"), and without cudaSetDevice every rank
// opens device 0; so each rank selects device = its node-local rank (ranks of a node numbered in
// world-rank order, MPI_COMM_TYPE_SHARED), before any other CUDA call.
//
// More ranks on a node than GPUs cannot run. Every rank learns every node's counts (one
// MPI_Allgather), so all ranks reach the same verdict, world rank 0 prints one line, and every
// rank exits 1: nobody waits for a rank that gave up.
#pragma once
#include <string>
#include <vector>

// What one rank sees of MPI and of its node.
struct RankPlace {
  int thread_level;     // MPI_Init_thread's provided level
  int ranks_on_node;    // ranks sharing this rank's node (MPI_COMM_TYPE_SHARED)
  int devices_on_node;  // cudaGetDeviceCount; 0 when it fails (no driver, no GPU)
};

// Why the world of these ranks (index = world rank) cannot run, as one line prefixed
// "<program>: error: " and naming the counts and what to do; "" when it can: MPI provides
// MPI_THREAD_MULTIPLE everywhere and every node has a GPU per rank. The first node in world-rank
// order that falls short is named ("this node" when it is world rank 0's).
std::string rank_place_error(const std::vector<RankPlace>& world, const char* program);

// MPI_Init_thread(MPI_THREAD_MULTIPLE), then cudaSetDevice(node-local rank). Collective over
// MPI_COMM_WORLD. Returns true when this rank may go on (the caller calls MPI_Finalize at its end).
// Returns false on every rank when rank_place_error finds a problem: world rank 0 has printed its
// line to stderr and MPI is finalised; the caller exits with status 1.
bool start_rank_on_own_device(int* argc, char*** argv, const char* program);
