# `cmake --install build [--prefix DIR]`: a relocatable installation (GNUInstallDirs layout).
#   bin/            kiln-coordinator, kiln-worker, kiln, kiln-agent, kiln-bench-*
#   libexec/kiln/   kiln-trial, the worker's sandboxed trial child (not for direct use); binaries
#                   find it from their own path (workers/sandbox.h), so the tree can move
#   share/kiln/     deploy/: systemd units (ExecStart names this prefix), Containerfiles,
#                   Kubernetes manifests, Prometheus config and rules, Grafana dashboard
#   share/doc/kiln/ README.md and docs/
# Kernel templates and probe programs are compiled into the binaries: nothing else is read at
# run time. Components (--component NAME): coordinator, worker, client, agent, bench, deploy, docs.

install(TARGETS kiln-coordinator RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT coordinator)
install(TARGETS kiln-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT worker)
install(TARGETS kiln-trial RUNTIME DESTINATION ${KILN_INSTALL_TRIAL_DIR} COMPONENT worker)
install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT client)
install(TARGETS kiln-agent RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT agent)
foreach(bench kiln-bench-search kiln-bench-kernels kiln-bench-roofline kiln-bench-opencl-gemm
              kiln-bench-load kiln-bench-agent-cost)
  if(TARGET ${bench})  # the OpenCL one exists only where the OpenCL backend is built
    install(TARGETS ${bench} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT bench)
  endif()
endforeach()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/ DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln
        USE_SOURCE_PERMISSIONS COMPONENT deploy)
# The units in the repository name /usr/local/bin/kiln-* (and libexec/kiln): the installed copies
# name the prefix they are installed into (which --prefix may change at install time).
install(CODE "
  file(GLOB kiln_units \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/kiln/systemd/*.service\")
  foreach(unit IN LISTS kiln_units)
    file(READ \"\${unit}\" text)
    string(REPLACE \"/usr/local/bin/\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/\" text \"\${text}\")
    string(REPLACE \"/usr/local/libexec/kiln/\" \"\${CMAKE_INSTALL_PREFIX}/${KILN_INSTALL_TRIAL_DIR}/\"
           text \"\${text}\")
    file(WRITE \"\${unit}\" \"\${text}\")
  endforeach()" COMPONENT deploy)

install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT docs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT docs)
