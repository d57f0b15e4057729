// iree_host: call a function of a compiled IREE module (.vmfb) from C.
//
// A minimal host program against IREE's runtime API, for the portable variants that
// hatch-jaxexport bakes into wheels (see docs/portable.md). Usage:
//
//   iree_host MODULE.vmfb FUNCTION [SHAPExTYPE:FILE ...]
//
//   FUNCTION   the entry point, "<module>.main" (the interface JSON's iree.function)
//   SHAPExTYPE one input's shape and element type as the interface JSON's mlir_type
//              gives it: 4x8xf32, 16xi32, f32 (a scalar)...
//   FILE       the input's raw data: dense, row-major, little-endian (numpy: a.tofile())
//
// Inputs go in the order of the interface's "inputs"; every output is printed.
// Build with CMake against an IREE source checkout (see CMakeLists.txt and README.md).

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iree/runtime/api.h"

// Reads a whole file into memory allocated with |allocator|.
static iree_status_t read_file(const char* path, iree_allocator_t allocator,
                               void** out_data, iree_host_size_t* out_length) {
  *out_data = NULL;
  *out_length = 0;
  FILE* file = fopen(path, "rb");
  if (!file) {
    return iree_make_status(IREE_STATUS_NOT_FOUND, "cannot open %s", path);
  }
  iree_status_t status = iree_ok_status();
  long length = -1;
  if (fseek(file, 0, SEEK_END) == 0) length = ftell(file);
  if (length < 0 || fseek(file, 0, SEEK_SET) != 0) {
    status = iree_make_status(IREE_STATUS_DATA_LOSS, "cannot size %s", path);
  }
  void* data = NULL;
  if (iree_status_is_ok(status)) {
    status = iree_allocator_malloc(allocator, (iree_host_size_t)length + 1, &data);
  }
  if (iree_status_is_ok(status) &&
      fread(data, 1, (size_t)length, file) != (size_t)length) {
    status = iree_make_status(IREE_STATUS_DATA_LOSS, "cannot read %s", path);
  }
  fclose(file);
  if (!iree_status_is_ok(status)) {
    iree_allocator_free(allocator, data);
    return status;
  }
  *out_data = data;
  *out_length = (iree_host_size_t)length;
  return status;
}

// Parses "SHAPExTYPE:FILE" and pushes the input onto |call|.
static iree_status_t push_input(iree_runtime_session_t* session, iree_runtime_call_t* call,
                                const char* arg) {
  const char* colon = strrchr(arg, ':');
  if (!colon) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT,
                            "input '%s' is not SHAPExTYPE:FILE", arg);
  }
  iree_hal_dim_t shape[16];
  iree_host_size_t rank = 0;
  iree_hal_element_type_t element_type = IREE_HAL_ELEMENT_TYPE_NONE;
  IREE_RETURN_IF_ERROR(iree_hal_parse_shape_and_element_type(
      iree_make_string_view(arg, (iree_host_size_t)(colon - arg)), IREE_ARRAYSIZE(shape),
      &rank, shape, &element_type));
  iree_host_size_t expected = iree_hal_element_dense_byte_count(element_type);
  for (iree_host_size_t i = 0; i < rank; ++i) expected *= (iree_host_size_t)shape[i];

  iree_allocator_t host_allocator = iree_runtime_session_host_allocator(session);
  void* data = NULL;
  iree_host_size_t length = 0;
  IREE_RETURN_IF_ERROR(read_file(colon + 1, host_allocator, &data, &length));
  iree_status_t status = iree_ok_status();
  if (length != expected) {
    status = iree_make_status(IREE_STATUS_INVALID_ARGUMENT,
                              "%s holds %zu bytes; %.*s needs %zu", colon + 1,
                              (size_t)length, (int)(colon - arg), arg, (size_t)expected);
  }
  iree_hal_buffer_view_t* view = NULL;
  if (iree_status_is_ok(status)) {
    iree_hal_buffer_params_t params = {
        .type = IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL,
        .access = IREE_HAL_MEMORY_ACCESS_ALL,
        .usage = IREE_HAL_BUFFER_USAGE_DEFAULT,
    };
    status = iree_hal_buffer_view_allocate_buffer_copy(
        iree_runtime_session_device(session),
        iree_runtime_session_device_allocator(session), rank, shape, element_type,
        IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR, params,
        iree_make_const_byte_span(data, length), &view);
  }
  if (iree_status_is_ok(status)) {
    status = iree_runtime_call_inputs_push_back_buffer_view(call, view);
  }
  iree_hal_buffer_view_release(view);
  iree_allocator_free(host_allocator, data);
  return status;
}

static iree_status_t run(const char* module_path, const char* function, int input_count,
                         char** inputs) {
  iree_runtime_instance_options_t instance_options;
  iree_runtime_instance_options_initialize(&instance_options);
  iree_runtime_instance_options_use_all_available_drivers(&instance_options);
  iree_runtime_instance_t* instance = NULL;
  IREE_RETURN_IF_ERROR(iree_runtime_instance_create(
      &instance_options, iree_allocator_system(), &instance));

  // local-task: the CPU, multithreaded (the module was compiled for llvm-cpu).
  iree_hal_device_t* device = NULL;
  iree_status_t status = iree_runtime_instance_try_create_default_device(
      instance, iree_make_cstring_view("local-task"), &device);

  iree_runtime_session_t* session = NULL;
  if (iree_status_is_ok(status)) {
    iree_runtime_session_options_t session_options;
    iree_runtime_session_options_initialize(&session_options);
    status = iree_runtime_session_create_with_device(
        instance, &session_options, device, iree_runtime_instance_host_allocator(instance),
        &session);
  }
  if (iree_status_is_ok(status)) {
    status = iree_runtime_session_append_bytecode_module_from_file(session, module_path);
  }

  iree_runtime_call_t call;
  memset(&call, 0, sizeof(call));
  bool call_ready = false;
  if (iree_status_is_ok(status)) {
    status = iree_runtime_call_initialize_by_name(
        session, iree_make_cstring_view(function), &call);
    call_ready = iree_status_is_ok(status);
  }
  for (int i = 0; i < input_count && iree_status_is_ok(status); ++i) {
    status = push_input(session, &call, inputs[i]);
  }
  if (iree_status_is_ok(status)) {
    status = iree_runtime_call_invoke(&call, /*flags=*/0);
  }
  if (iree_status_is_ok(status)) {
    iree_host_size_t count = iree_vm_list_size(iree_runtime_call_outputs(&call));
    for (iree_host_size_t i = 0; i < count && iree_status_is_ok(status); ++i) {
      iree_hal_buffer_view_t* output = NULL;
      status = iree_runtime_call_outputs_pop_front_buffer_view(&call, &output);
      if (iree_status_is_ok(status)) {
        fprintf(stdout, "output %zu: ", (size_t)i);
        status = iree_hal_buffer_view_fprint(stdout, output, /*max_element_count=*/1024,
                                             iree_runtime_session_host_allocator(session));
        fprintf(stdout, "\n");
      }
      iree_hal_buffer_view_release(output);
    }
  }

  if (call_ready) iree_runtime_call_deinitialize(&call);
  iree_runtime_session_release(session);
  iree_hal_device_release(device);
  iree_runtime_instance_release(instance);
  return status;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s MODULE.vmfb FUNCTION [SHAPExTYPE:FILE ...]\n"
            "  e.g. %s mlp.vmfb jit_mlp_apply_batch4.main 32xf32:b0.bin 8x32xf32:w0.bin ...\n",
            argv[0], argv[0]);
    return 2;
  }
  iree_status_t status = run(argv[1], argv[2], argc - 3, argv + 3);
  if (!iree_status_is_ok(status)) {
    iree_status_fprint(stderr, status);
    iree_status_free(status);
    return 1;
  }
  return 0;
}
