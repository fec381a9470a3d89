/* Tessera's shim over libfabric: one real (linkable) function for each `static inline` call the
 * safe wrapper in tessera-ofi uses. libfabric reaches its providers through function tables
 * inside each fid; the header turns every call into an inline that loads the right slot, which
 * Rust cannot call, so each function here only forwards its arguments. */
#ifndef TESSERA_OFI_SHIM_H
#define TESSERA_OFI_SHIM_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

/* FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) of the headers built against. */
uint32_t tessera_fi_version(void);
struct fi_info *tessera_fi_allocinfo(void);
int tessera_fi_close(struct fid *fid);

int tessera_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain,
		      void *context);
int tessera_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
			void *context);
int tessera_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
		       void *context);
int tessera_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
		       void *context);
int tessera_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int tessera_fi_enable(struct fid_ep *ep);
int tessera_fi_getname(struct fid_ep *ep, void *addr, size_t *addrlen);
int tessera_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
			 uint64_t flags, void *context);
const char *tessera_fi_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len);

int tessera_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
		      uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
		      void *context);
uint64_t tessera_fi_mr_key(struct fid_mr *mr);
void *tessera_fi_mr_desc(struct fid_mr *mr);

ssize_t tessera_fi_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags);
ssize_t tessera_fi_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags);
ssize_t tessera_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t tessera_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
const char *tessera_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data,
				   char *buf, size_t len);

#endif
