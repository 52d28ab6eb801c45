"""How many bits a 1-minute numeric rollup slice of the TSBS-shaped random walk carries.

The target is <= 2,000 bytes per stream-day at the 1-minute rollup level (1,440 slices: 11.1
bits per slice, file overhead included). This estimates the information in one slice of the
workload `numeric_bench` writes (a float walk with N(0, 1) steps clamped to 0..100, stored
truncated to integers, one sample per 10 s, so 6 samples per slice) by the plug-in entropy of
the residuals `encode/aggregate.rs` codes, joined one after another (each joint entropy is a
lower bound for coding those columns together, up to the plug-in estimate's small bias).

Run: python3 -m venv v && v/bin/pip install numpy && v/bin/python entropy.py
"""
import numpy as np
rng=np.random.default_rng(1)
S=2000; T=8640  # series, samples per series (one day at 10 s)
v=rng.random(S)*100
vals=np.empty((S,T))
for t in range(T):
    v=np.clip(v+rng.standard_normal(S),0,100); vals[:,t]=np.trunc(v)
x=vals.astype(np.int64)
d=np.diff(x,axis=1)
def H(a):
    a=np.ascontiguousarray(a)
    if a.ndim==1: a=a[:,None]
    _,c=np.unique(a,axis=0,return_counts=True); p=c/c.sum()
    return -(p*np.log2(p)).sum(), len(c)
print("raw step entropy bits/sample", H(d.ravel()))
sl=x.reshape(S,T//6,6)
first=sl[:,:,0]; last=sl[:,:,5]; mn=sl.min(2); mx=sl.max(2); s=sl.sum(2); q=(sl*sl).sum(2)
prevlast=np.concatenate([np.zeros((S,1),np.int64),last[:,:-1]],1)
# increase: steps whose later sample in slice (including from prevlast)
full=np.concatenate([prevlast[:,:,None],sl],2)
st=np.diff(full,axis=2)
inc=np.where(st>=0,st,full[:,:,1:]).sum(2)
cols=dict(f=(first-prevlast), l=(last-first), mn=(np.minimum(first,last)-mn), mx=(mx-np.maximum(first,last)),
  s=(2*s-6*(mn+mx)), q=(6*q-s*s), inc=(inc-(last-first)))
N=S*(T//6-1)
C={k:v[:,1:].ravel() for k,v in cols.items()}
tot=0; acc=[]
for k in ['f','l','mn','mx','s','q','inc']:
    hm,_=H(C[k])
    acc.append(C[k]); hj,K=H(np.stack(acc,1))
    print(k,"marginal %.2f"%hm,"joint %.2f"%hj,"support",K)
acc=[C[k] for k in ['f','l','mn','mx','s','q']]
print("joint without inc", H(np.stack(acc,1)))
# with prev increase context
