// The first thing every MPI program of the project does: initialise MPI at the thread level the
// project needs, and give each rank its own GPU, before any other CUDA call. NCCL refuses a
// communicator in which two ranks of one node share a GPU ("Duplicate GPU detected"), and
// without cudaSetDevice every rank opens device 0.
//
// Launchers hand out GPUs in two ways, and one rule serves both: a rank selects device = its
// node-local rank modulo the devices it sees (ranks of a node numbered in world-rank order,
// MPI_COMM_TYPE_SHARED). Where every rank sees all of the node's GPUs (mpirun, Slurm's default),
// that is its local rank; where a launcher or a wrapper gives each rank one GPU through
// CUDA_VISIBLE_DEVICES (Slurm's --gpus-per-task=1), it is device 0, a different GPU for each.
// What the rule cannot see is two ranks that end up on one physical GPU (more ranks than GPUs,
// or the same CUDA_VISIBLE_DEVICES for several ranks): each rank's GPU UUID (cudaDeviceProp::uuid)
// is compared with those of its node's other ranks.
//
// Every rank learns every rank's view (one MPI_Allgather), so all ranks reach the same verdict,
// world rank 0 prints one line, and every rank exits 1: nobody waits for a rank that gave up.
#pragma once
#include <string>
#include <vector>

// What one rank sees of MPI and of its node.
struct RankPlace {
  int thread_level;     // MPI_Init_thread's provided level
  int node;             // the node's identity: the first world rank on it (MPI_COMM_TYPE_SHARED)
  int local_rank;       // this rank's place among the node's ranks, in world-rank order
  int ranks_on_node;    // ranks sharing this rank's node
  int visible_devices;  // cudaGetDeviceCount; 0 when it fails (no driver, no GPU visible)
  char gpu_uuid[16];    // cudaDeviceProp::uuid of rank_device(place) (when visible_devices > 0)
};

// The device a rank selects: its local rank modulo the devices it sees.
int rank_device(const RankPlace& place);

// Why the world of these ranks (index = world rank) cannot run, as one line prefixed
// "<program>: error: " and naming the counts and what to do; "" when it can: MPI provides
// MPI_THREAD_MULTIPLE everywhere, every rank sees a GPU, and no two ranks of a node select the
// same GPU (then both world ranks and the GPU are named). The first problem in world-rank order
// is named, its node as "this node" when it is world rank 0's.
std::string rank_place_error(const std::vector<RankPlace>& world, const char* program);

// MPI_Init_thread(MPI_THREAD_MULTIPLE), then cudaSetDevice(rank_device). Collective over
// MPI_COMM_WORLD. Returns true when this rank may go on (the caller calls MPI_Finalize at its end).
// Returns false on every rank when rank_place_error finds a problem: world rank 0 has printed its
// line to stderr and MPI is finalised; the caller exits with status 1.
bool start_rank_on_own_device(int* argc, char*** argv, const char* program);
