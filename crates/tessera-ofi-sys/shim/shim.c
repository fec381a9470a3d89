/* See shim.h: each function forwards to the libfabric inline of the same name. */
#include "shim.h"

uint32_t tessera_fi_version(void) { return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION); }

struct fi_info *tessera_fi_allocinfo(void) { return fi_allocinfo(); }

int tessera_fi_close(struct fid *fid) { return fi_close(fid); }

int tessera_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain,
		      void *context)
{
	return fi_domain(fabric, info, domain, context);
}

int tessera_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
			void *context)
{
	return fi_endpoint(domain, info, ep, context);
}

int tessera_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
		       void *context)
{
	return fi_av_open(domain, attr, av, context);
}

int tessera_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
		       void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}

int tessera_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags)
{
	return fi_ep_bind(ep, bfid, flags);
}

int tessera_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }

int tessera_fi_getname(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	return fi_getname(&ep->fid, addr, addrlen);
}

int tessera_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
			 uint64_t flags, void *context)
{
	return fi_av_insert(av, addr, count, fi_addr, flags, context);
}

const char *tessera_fi_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len)
{
	return fi_av_straddr(av, addr, buf, len);
}

int tessera_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
		      uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
		      void *context)
{
	return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context);
}

uint64_t tessera_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }

void *tessera_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }

ssize_t tessera_fi_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	return fi_readmsg(ep, msg, flags);
}

ssize_t tessera_fi_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	return fi_writemsg(ep, msg, flags);
}

ssize_t tessera_fi_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return fi_cq_read(cq, buf, count);
}

ssize_t tessera_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}

const char *tessera_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data,
				   char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}
